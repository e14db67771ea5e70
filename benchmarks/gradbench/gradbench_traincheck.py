"""TrainCheck's silent-bug set (OSDI '25), classified against gradguard's scope.

The bug ids, their root causes and the scripts named here come from TrainCheck's public
evaluation workloads; nothing of theirs is copied into this repository. The runner lints the
named scripts of a local checkout (``--traincheck-dir``) and stores only the findings.
"In scope" means: a bug of the gradient-buffer family (what happens to ``.grad`` between
backward passes and optimizer steps), which gradguard's rules address.
"""

REPO = "OrderLab/TrainCheck-Evaluation-Workloads@2de9268be8845dade014e5e065693e4fdd9095d6"
PUBLISHED = "detected (listed among the 18 the paper detects; AE table of OrderLab/TrainCheck@e478ec6)"

_OUT = "no: "

BUGS = [
    dict(id="baichuan2-86", what="multi-GPU inference corrupted by faulty GPU peer-to-peer transfers",
         scope=_OUT + "hardware / communication", scripts=[], gradguard="not applicable"),
    dict(id="deepspeed-1801", what="BF16_Optimizer gradient clipping under tensor parallelism leaves norm weights out of sync across ranks",
         scope=_OUT + "cross-rank consistency of an optimizer, not the .grad lifecycle", scripts=[],
         gradguard="not applicable (needs 2 GPUs and a patched Megatron-DeepSpeed)"),
    dict(id="deepspeed-5794", what="MoE all_to_all invoked inconsistently across workers: training hangs",
         scope=_OUT + "collective communication", scripts=["bug.py"], gradguard="not applicable"),
    dict(id="lightning-thunder-725", what="autocast transformation applied to non-torch symbols (compiler regression)",
         scope=_OUT + "compiler", scripts=["LT725.py"], gradguard="not applicable"),
    dict(id="mmpretrain-702", what="frozen_stages not applied before the first forward: 'frozen' stages are trained",
         scope=_OUT + "which parameters should train is a model-configuration question (gradguard checks the opposite, GG106)",
         scripts=["vgg19-finetune-cifar10.py"], gradguard="not applicable"),
    dict(id="pytorch-51800", what="spectral_norm initialises weights lazily at the first forward",
         scope=_OUT + "initialisation", scripts=["bug_repro.py", "mnist_51800_buggy.py"], gradguard="not applicable"),
    dict(id="pytorch-84803", what="data loss in GPU peer-to-peer transfers (RTX 4090)",
         scope=_OUT + "hardware / communication", scripts=["translation.py"], gradguard="not applicable"),
    dict(id="pytorch-96600", what="same root cause as pytorch-84803", scope=_OUT + "hardware / communication",
         scripts=[], gradguard="not applicable"),
    dict(id="pytorch-104336", what="DDP model moved to CPU and back: DDP's hooks point at the old parameters, gradients are no longer all-reduced",
         scope=_OUT + "gradient synchronisation across ranks (the watch sees one rank's .grad)",
         scripts=["bug.py", "ddp-resnet18-cifar10.py"], gradguard="not applicable (needs 2 GPUs)"),
    dict(id="pytorch-115607", what="under torch._dynamo, an optimizer step with all .grad None still differs from eager (step counter)",
         scope=_OUT + "compiler; the program's .grad handling is correct",
         scripts=["simple_buggy.py", "complex_buggy.py"],
         gradguard="not applicable; simple_buggy.py no longer runs on torch 2.13 (torch._dynamo.optimize lost save_config)"),
    dict(id="pytorch-forum-84911", what="all layers but BatchNorm frozen by mistake, inputs resized to 1024x1024",
         scope=_OUT + "model configuration", scripts=["bug.py"], gradguard="not applicable"),
    dict(id="stackoverflow-60335387", what="MNIST training loop without optimizer.zero_grad()",
         scope="yes: missing clearing (GG101)", scripts=["bug.py", "fixed.py"],
         gradguard="lint: GG101 on bug.py, nothing on fixed.py; watch: GG101 at step 2 on the reproduction in "
                   "`c01_so60335387_mnist_no_zero_grad` (the script itself downloads MNIST, which this machine cannot)"),
    dict(id="stackoverflow-67180955", what="DataLoader workers share a NumPy seed: identical augmentations",
         scope=_OUT + "data pipeline", scripts=["bug.py"], gradguard="not applicable"),
    dict(id="transformers-17877", what="weight initialisation invoked repeatedly on GPT-2's parameters",
         scope=_OUT + "initialisation", scripts=["bug.py"], gradguard="not applicable"),
    dict(id="transformers-23723", what="Whisper generation fails for long prompts with max_new_tokens",
         scope=_OUT + "inference", scripts=["bug.py", "finetune_whisper.py"], gradguard="not applicable"),
    dict(id="transformers-33844", what="M2M100 FlashAttention2 keeps dropout on in eval mode",
         scope=_OUT + "module behaviour", scripts=["bug.py"], gradguard="not applicable"),
    dict(id="transformers-34204", what="PixtralProcessor collapses a batch of 50 into one",
         scope=_OUT + "data processing", scripts=["bug.py"], gradguard="not applicable"),
    dict(id="x-jxmnop-ddp-out-of-sync", what="DDP ranks drift apart (user code; same trace as pytorch-104336)",
         scope=_OUT + "gradient synchronisation across ranks", scripts=["bug.py", "correct.py"],
         gradguard="not applicable"),
]
for _bug in BUGS:
    _bug["traincheck"] = PUBLISHED
