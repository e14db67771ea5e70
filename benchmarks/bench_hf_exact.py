"""Cost of ``exact(trainer)`` against the stock HF ``Trainer``, side by side in one run.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_hf_exact.py [--rounds 60] [--vocab 8000] [--layers 2]
        [--hidden 256]

A Llama-style causal LM (``--layers`` layers of width ``--hidden``, vocabulary ``--vocab``), micro-batches of
4 rows of 128 tokens (rows of random length, right-padded), ``gradient_accumulation_steps=4``, on the CPU. A stock
trainer and an ``exact()`` one (same model, same data) are built once; each round runs one window
through each, in alternating order: the trainer's own ``get_batch_samples`` and ``training_step``
for each of the K micro-batches, as ``train()`` calls them (forward, loss, backward; the optimizer
step, the same in both, is left out, so the ratio is an upper bound on the step's). Each window is
timed on the wall clock and in CPU time of the main thread (all the work runs there with one torch
thread and the data loader in the main process; CPU time does not count the time the process waited
for a core on a busy machine). Printed per clock: the median window time of each, the ratio of
medians, and the per-round ratios (paired: the two windows of a round share the machine's load) as
median (with a 95 % bootstrap interval of that median), quartiles and range.

exact() passes the labels to the model, so each micro-batch computes the model's own cross entropy
(which the stock Trainer computes too) and gradguard's token sum over the same logits (the one
backpropagated), taken from the log-softmax the model's loss computed where its autograd graph shows one;
the difference is that gather, the count of the window's targets and the per-window check.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time

import torch
import transformers

from gradguard.integrations.transformers import exact

transformers.logging.set_verbosity_error()
K, MICRO, SEQ = 4, 4, 128


class StepTimer(transformers.TrainerCallback):
    def __init__(self):
        self.times = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self.t0)


def rows(n, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = SEQ // 2 + int(torch.randint(0, SEQ // 2 + 1, (1,), generator=g))
        ids = torch.randint(3, vocab, (length,), generator=g)
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out


def collate(rows_):
    longest = max(len(r["input_ids"]) for r in rows_)

    def pad(key, fill):
        return torch.stack([torch.cat([r[key], r[key].new_full((longest - len(r[key]),), fill)]) for r in rows_])

    mask = torch.stack([(torch.arange(longest) < len(r["input_ids"])).long() for r in rows_])
    return {"input_ids": pad("input_ids", 0), "attention_mask": mask, "labels": pad("labels", -100)}


def build(fix, data, vocab, d, layers=2, hidden=256):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=SEQ))
    args = transformers.TrainingArguments(
        output_dir=d, per_device_train_batch_size=MICRO, gradient_accumulation_steps=K, max_steps=1,
        learning_rate=1e-3, optim="sgd", report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, data_collator=collate)
    return exact(trainer) if fix else trainer


def window(trainer):
    """One window as train() runs it: the trainer's get_batch_samples, then training_step per micro-batch."""
    model = trainer.model
    model.train()
    t0, c0 = time.perf_counter(), time.thread_time()
    batches, num_items = trainer.get_batch_samples(iter(trainer.get_train_dataloader()), K, trainer.args.device)
    trainer.current_gradient_accumulation_steps = len(batches)
    for b in batches:
        trainer.training_step(model, b, num_items)
    elapsed = (time.perf_counter() - t0, time.thread_time() - c0)
    model.zero_grad(set_to_none=True)
    return elapsed


def quartiles(xs):
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def bootstrap_median(xs, draws=2000, seed=0):
    """A 95 % interval of the median of ``xs`` (resampled with replacement): how far the paired ratio's median
    itself could move with another run of as many rounds on the same machine."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    a = p.parse_args(argv)
    data = rows(MICRO * K, a.vocab)
    stock, fixed = [], []
    with tempfile.TemporaryDirectory() as d:
        trainers = {fix: build(fix, data, a.vocab, d, a.layers, a.hidden) for fix in (False, True)}
        for fix in (False, True):
            window(trainers[fix])  # warm-up
        for r in range(a.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            got = {fix: window(trainers[fix]) for fix in order}
            stock.append(got[False])
            fixed.append(got[True])
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}, "
          f"vocab {a.vocab}, layers {a.layers}, hidden {a.hidden}, K={K}, micro-batch {MICRO}x{SEQ}, {a.rounds} rounds")
    for c, clock in enumerate(("wall", "CPU")):
        s, f = [x[c] for x in stock], [x[c] for x in fixed]
        paired = [b / a_ for a_, b in zip(s, f)]
        ms, mf = statistics.median(s), statistics.median(f)
        lo, hi = quartiles(paired)
        c_lo, c_hi = bootstrap_median(paired)
        print(f"{clock:4s}: window (K training_steps) median stock {ms * 1e3:.1f} ms, exact {mf * 1e3:.1f} ms; "
              f"ratio of medians {mf / ms:.3f}; paired ratio median {statistics.median(paired):.3f} "
              f"(95 % interval of that median {c_lo:.3f}-{c_hi:.3f}; quartiles {lo:.3f}-{hi:.3f}, "
              f"range {min(paired):.3f}-{max(paired):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
