"""``check_trainer``, ``exact`` and ``Watch`` with real HF ``Trainer`` runs on tiny models built from configs.

No download: every model is built from a tiny config, tokens are random ids.
Each verdict and each ``exact`` run is compared with a gradient measured
independently of gradguard: the trainer itself takes one SGD step with lr=1
and no clipping (so the parameter change is minus the gradient it applied),
against the float64 gradient of the token-mean loss over the same rows
computed here by hand (each row run alone, unpadded). Beside each ``exact``
run the same run without it is measured too, so a test cannot pass by
accident.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import tempfile

import pytest
import torch
import torch.nn.functional as F
from torch import nn

transformers = pytest.importorskip("transformers")

import gradguard as gg  # noqa: E402
from gradguard.integrations.transformers import Watch, check_trainer, exact  # noqa: E402

import _integrations as S  # noqa: E402

pytestmark = pytest.mark.slow
transformers.logging.set_verbosity_error()

V, T, BS, K = 40, 12, 2, 3  # vocabulary, sequence length, micro-batch size, micro-batches per step


def rows(ignore_first=False, equal=False, seed=0):
    """K * BS rows (exactly one window): labels = input_ids with a varying number of leading positions ignored."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(K * BS):
        ids = torch.randint(0, V, (T,), generator=g)
        labels = ids.clone()
        labels[: (2 if equal else i % 5) + (1 if ignore_first else 0)] = -100
        out.append({"input_ids": ids, "labels": labels})
    return out


class TinyLM(nn.Module):
    """A model whose forward takes no loss kwargs: it returns the mean over its own (unshifted) targets."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.head = nn.Linear(16, V)

    def forward(self, input_ids, labels=None):
        logits = self.head(torch.tanh(self.emb(input_ids)))
        loss = None if labels is None else F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits}


class MeanComputeLoss(transformers.Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # gradguard: ignore[GG301] (the bug under test)
        out = model(**inputs)
        loss = out["loss"]  # a per-micro-batch mean: num_items_in_batch accepted, never used
        return (loss, out) if return_outputs else loss


def make_model(kind, dropout=0.0):
    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                                       attention_dropout=dropout)
        return transformers.LlamaForCausalLM(cfg)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                      resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
        return transformers.GPT2LMHeadModel(cfg)
    if kind == "logits":
        return LogitsLM()
    return TinyLM()


def make_trainer(tmp_path, model, data, cls=transformers.Trainer, lr=1e-3, **kw):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=BS, gradient_accumulation_steps=K, max_steps=1,
        learning_rate=lr, weight_decay=0.0, max_grad_norm=0.0, report_to=[], save_strategy="no",
        logging_strategy="no", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0, **kw,
    )
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return cls(model=model, args=args, train_dataset=data, optimizers=(opt, sched))


def reference_grads(model, data, shifted):
    """float64 gradient of the mean token loss over all of ``data`` (independent of gradguard)."""
    import copy

    ref = copy.deepcopy(model).double()
    ids = torch.stack([r["input_ids"] for r in data])
    labels = torch.stack([r["labels"] for r in data])
    out = ref(input_ids=ids)
    logits = out["logits"]
    if shifted:
        logits, labels = logits[:, :-1], labels[:, 1:]
    F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100).backward()
    return {n: p.grad for n, p in ref.named_parameters()}


def measured_rel_diff(tmp_path, kind, data, shifted, cls=transformers.Trainer, dropout=0.0):
    """Let the real Trainer take one step with SGD(lr=1): the parameter change is minus its gradient."""
    model = make_model(kind, dropout)
    want = reference_grads(model, data, shifted)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    make_trainer(tmp_path, model, data, cls=cls, lr=1.0).train()
    diff = max(float(((before[n] - p.detach()).double() - want[n]).abs().max()) for n, p in model.named_parameters())
    return diff / max(float(w.abs().max()) for w in want.values())


CASES = [
    # kind, data, shifted, trainer class, expected verdict, a word the cause must contain
    pytest.param("llama", dict(), True, transformers.Trainer, True, None, id="llama-exact"),
    pytest.param("gpt2", dict(ignore_first=True), True, transformers.Trainer, True, None, id="gpt2-first-label-ignored"),
    pytest.param("gpt2", dict(), True, transformers.Trainer, None, "counted", id="gpt2-stock-labels"),
    pytest.param("tiny", dict(), False, transformers.Trainer, False, "**kwargs", id="no-loss-kwargs-unequal"),
    pytest.param("tiny", dict(equal=True), False, transformers.Trainer, True, None, id="no-loss-kwargs-equal"),
    pytest.param("gpt2", dict(ignore_first=True), True, MeanComputeLoss, False, "ignores num_items_in_batch",
                 id="compute-loss-ignores-num-items"),
]


@pytest.mark.parametrize("kind, data_kw, shifted, cls, expected, cause", CASES)
def test_verdict_matches_an_independently_measured_gradient(tmp_path, kind, data_kw, shifted, cls, expected, cause):
    data = rows(**data_kw)
    measured = measured_rel_diff(tmp_path, kind, data, shifted, cls)
    report = check_trainer(make_trainer(tmp_path, make_model(kind), data, cls=cls))
    assert report.equivalent == (measured < 1e-4), (report, measured)
    if expected is not None:
        assert report.equivalent is expected, (report, measured)
    if report.equivalent:
        assert report.max_rel_diff < 1e-4 and report.causes == []
    else:
        assert measured > 1e-4 and report.max_rel_diff == pytest.approx(measured, rel=1e-3)
        assert len(report.causes) == 1 and cause in report.causes[0], report.causes
        assert "Fix:" in report.causes[0]


def test_stock_gpt2_count_is_named(tmp_path):
    """Stock GPT2 (labels == input_ids): whatever this version counts, the report says what it counted."""
    report = check_trainer(make_trainer(tmp_path, make_model("gpt2"), rows()))
    assert sum(report.items) == sum(int((r["labels"][1:] != -100).sum()) for r in rows())
    if not report.equivalent:
        assert report.num_items_in_batch == sum(int((r["labels"] != -100).sum()) for r in rows())


def test_dropout_is_switched_off_and_named(tmp_path):
    data = rows(ignore_first=True)
    report = check_trainer(make_trainer(tmp_path, make_model("gpt2", dropout=0.3), data))
    assert report.equivalent and report.dropout_off
    assert any("drop" in name for name in report.dropout_off)


def test_state_is_left_bit_identical(tmp_path):
    model = make_model("gpt2", dropout=0.1)
    trainer = make_trainer(tmp_path, model, rows())
    # Give the optimizer state and the parameters gradients, as a run in progress has.
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    trainer.optimizer.step()
    opt_state = {k: {kk: vv.clone() if torch.is_tensor(vv) else vv for kk, vv in v.items()}
                 for k, v in trainer.optimizer.state_dict()["state"].items()}
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    drop = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
    rng = torch.get_rng_state()
    check_trainer(trainer)
    assert all(torch.equal(p, params[n]) for n, p in model.named_parameters())
    assert all(torch.equal(p.grad, grads[n]) for n, p in model.named_parameters())
    assert [m.p for m in model.modules() if isinstance(m, nn.Dropout)] == drop
    assert torch.equal(torch.get_rng_state(), rng)
    after = trainer.optimizer.state_dict()["state"]
    assert all(torch.equal(after[k][kk], vv) for k, v in opt_state.items() for kk, vv in v.items() if torch.is_tensor(vv))
    assert "current_gradient_accumulation_steps" not in trainer.__dict__


def test_no_train_dataset_is_refused(tmp_path):
    trainer = make_trainer(tmp_path, make_model("gpt2"), None)
    with pytest.raises(gg.GradguardError, match="no train_dataset"):
        check_trainer(trainer)


# ---------------------------------------------------------------------- watch
def test_watch_callback_clean_and_findings_point_at_compute_loss(tmp_path):
    w = Watch(mode="record")
    trainer = make_trainer(tmp_path, make_model("gpt2"), rows(ignore_first=True))
    trainer.add_callback(w)
    trainer.train()
    assert w.findings == []

    class MeanOverMicroBatches(transformers.Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # gradguard: ignore[GG301] (the bug under test)
            logits = model(input_ids=inputs["input_ids"])["logits"][:, :-1]
            loss = F.cross_entropy(logits.reshape(-1, V), inputs["labels"][:, 1:].reshape(-1), ignore_index=-100)
            return loss

    w = Watch(mode="record")
    # The model takes no loss kwargs: the Trainer divides by K, a mean of means over unequal counts (GG105).
    trainer = make_trainer(tmp_path, make_model("gpt2"), rows(ignore_first=True), cls=MeanOverMicroBatches)
    trainer.model_accepts_loss_kwargs = False
    trainer.add_callback(w)
    trainer.train()
    assert [f.code for f in w.findings] == ["GG105"]
    src, first = inspect.getsourcelines(MeanOverMicroBatches.compute_loss)
    assert (w.findings[0].path, w.findings[0].line) == (__file__, first + 2)
    assert "check_trainer" in w.findings[0].message


# ====================================================================== exact
# The model families a new user meets, built from tiny configs, on padded variable-length rows.
FAMILIES = ("llama", "gpt2", "bert", "t5", "bart", "custom")
SHIFTED = {"llama", "gpt2"}  # causal LMs: logits[:-1] predict labels[1:]
SEQ2SEQ = {"t5", "bart"}


class CustomLM(nn.Module):
    """A custom module whose forward takes no **kwargs: the mean over its own (unshifted) targets."""

    def __init__(self, scale=1.0):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.head = nn.Linear(16, V)
        self.scale = scale  # != 1: a loss that is not the token mean (exact must refuse it)

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.head(torch.tanh(self.emb(input_ids)))
        loss = None
        if labels is not None:
            loss = self.scale * F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits}


def family_model(kind):
    torch.manual_seed(0)
    if kind == "llama":
        return make_model("llama")
    if kind == "gpt2":
        return make_model("gpt2")
    if kind == "bert":
        return transformers.BertForMaskedLM(transformers.BertConfig(
            vocab_size=V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    if kind == "t5":
        return transformers.T5ForConditionalGeneration(transformers.T5Config(
            vocab_size=V, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2,
            dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0))
    if kind == "bart":
        return transformers.BartForConditionalGeneration(transformers.BartConfig(
            vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
            dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1, bos_token_id=0,
            eos_token_id=2, decoder_start_token_id=2))
    return CustomLM()


def family_rows(kind, n, seed=0):
    """``n`` unpadded rows of random ids, 3 to 12 tokens long, with the labels the family trains on."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = 3 + (i * 7 + seed) % 10
        ids = torch.randint(3, V, (length,), generator=g)
        if kind == "bert":  # masked LM: about a third of the positions are targets, at least one
            labels = torch.full_like(ids, -100)
            pick = torch.rand(length, generator=g) < 0.35
            pick[i % length] = True
            labels[pick] = ids[pick]
        elif kind in SEQ2SEQ:
            labels = torch.randint(3, V, (2 + (i * 5 + seed) % 7,), generator=g)
        else:
            labels = ids.clone()
        out.append({"input_ids": ids, "labels": labels})
    return out


def pad_collate(rows_):
    """Pad to the micro-batch's longest row: ids with 0, labels with -100, an attention mask."""
    def pad(key, fill):
        longest = max(len(r[key]) for r in rows_)
        return torch.stack([torch.cat([r[key], r[key].new_full((longest - len(r[key]),), fill)]) for r in rows_])

    ids = pad("input_ids", 0)
    mask = torch.stack([(torch.arange(ids.shape[1]) < len(r["input_ids"])).long() for r in rows_])
    return {"input_ids": ids, "attention_mask": mask, "labels": pad("labels", -100)}


def family_reference(model, kind, data, smoothing=0.0):
    """float64 gradient of the mean loss over every target token of ``data``, each row alone and unpadded."""
    ref = copy.deepcopy(model).double()
    total, count = 0.0, 0
    for r in data:
        ids, labels = r["input_ids"][None], r["labels"][None]
        # A seq2seq model builds its decoder inputs from the labels; the loss is computed here from the logits.
        logits = ref(input_ids=ids, labels=labels)["logits"] if kind in SEQ2SEQ else ref(input_ids=ids)["logits"]
        if kind in SHIFTED:
            logits, labels = logits[:, :-1], labels[:, 1:]
        total = total + F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100,
                                        reduction="sum", label_smoothing=smoothing)
        count += int((labels != -100).sum())
    (total / count).backward()
    return {n: p.grad for n, p in ref.named_parameters() if p.grad is not None}


def family_trainer(tmp_path, model, data, k, cls=transformers.Trainer, **kw):
    """SGD with lr=1, no clipping, no decay, constant rate; rows in order, micro-batches of 2."""
    kw = {"max_steps": 1, "learning_rate": 1.0, "optim": "sgd", "lr_scheduler_type": "constant", "max_grad_norm": 0.0,
          **kw}
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, gradient_accumulation_steps=k, weight_decay=0.0,
        report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0, train_sampling_strategy="sequential", **kw)
    return cls(model=model, args=args, train_dataset=data, data_collator=pad_collate)


def applied_error(trainer, want):
    """Train; ``max|-(change) - want| / max|want|``: the gradient the trainer applied against ``want``."""
    model = trainer.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    diff = max(float(((before[n] - p.detach()).double() - want[n]).abs().max())
               for n, p in model.named_parameters() if n in want)
    return diff / max(float(w.abs().max()) for w in want.values())


def stock_is_wrong(kind, k):
    # Stock GPT2 counts position 0; with K > 1 every family but one whose loss divides by the count is off.
    return kind == "gpt2" or (k > 1 and kind != "llama")


EXACT_CASES = [(kind, k) for kind in ("gpt2", "bert", "t5") for k in (1, 2, 4)] + \
    [(kind, 4) for kind in ("llama", "bart", "custom")]


@pytest.mark.parametrize("kind, k", EXACT_CASES, ids=[f"{kind}-K{k}" for kind, k in EXACT_CASES])
def test_exact_is_the_full_batch_gradient_and_the_stock_trainer_is_not(tmp_path, kind, k):
    data = family_rows(kind, 2 * k)
    want = family_reference(family_model(kind), kind, data)
    stock = applied_error(family_trainer(tmp_path, family_model(kind), data, k), want)
    fixed = applied_error(exact(family_trainer(tmp_path, family_model(kind), data, k)), want)
    assert fixed < 1e-5, fixed  # float32 round-off
    assert (stock > 1e-3) == stock_is_wrong(kind, k), stock  # the control: what exact() repairs
    # check_trainer measures both (T5 and Bart need labels to run at all).
    before = check_trainer(family_trainer(tmp_path, family_model(kind), data, k))
    after = check_trainer(exact(family_trainer(tmp_path, family_model(kind), data, k)))
    assert after.equivalent and after.max_rel_diff < 1e-5, after
    assert before.equivalent != stock_is_wrong(kind, k), before
    if not before.equivalent:
        assert before.max_rel_diff == pytest.approx(stock, rel=1e-3)


@pytest.mark.parametrize("kind", ["bert", "t5", "bart"])
def test_check_trainer_names_a_model_loss_that_never_sees_the_count(tmp_path, kind):
    data = family_rows(kind, 8)
    report = check_trainer(family_trainer(tmp_path, family_model(kind), data, 4))
    assert not report.equivalent and len(report.causes) == 1
    cause = report.causes[0]
    model_name = type(family_model(kind)).__name__
    assert cause.startswith(f"{model_name}'s loss is a per-micro-batch mean that never sees num_items_in_batch"), cause
    assert "subclass" not in cause and "exact(trainer)" in cause


def test_exact_final_partial_window_and_several_steps(tmp_path):
    """K=4 over 6 micro-batches: windows of 4 and 2, each against plain full-batch SGD on the same rows."""
    kind, k = "bert", 4
    data = family_rows(kind, 12, seed=3)

    def run(fix):
        trainer = family_trainer(tmp_path, family_model(kind), data, k, max_steps=-1, num_train_epochs=1,
                                 learning_rate=0.5)
        trainer = exact(trainer) if fix else trainer
        trainer.train()
        assert trainer.state.global_step == 2
        return {n: p.detach().double() for n, p in trainer.model.named_parameters()}

    model = family_model(kind)
    for window in (data[:8], data[8:]):
        grads = family_reference(model, kind, window)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p -= 0.5 * grads[n].to(p.dtype)
    want = {n: p.detach().double() for n, p in model.named_parameters()}
    init = {n: p.detach().double() for n, p in family_model(kind).named_parameters()}

    def err(got):
        return max(float(((got[n] - init[n]) - (want[n] - init[n])).abs().max()) for n in want) / \
            max(float((want[n] - init[n]).abs().max()) for n in want)

    assert err(run(True)) < 1e-5
    assert err(run(False)) > 1e-2


def test_exact_keeps_the_trainers_label_smoothing(tmp_path):
    kind, k = "gpt2", 4
    data = family_rows(kind, 8)
    want = family_reference(family_model(kind), kind, data, smoothing=0.1)
    fixed = applied_error(exact(family_trainer(tmp_path, family_model(kind), data, k, label_smoothing_factor=0.1)), want)
    stock = applied_error(family_trainer(tmp_path, family_model(kind), data, k, label_smoothing_factor=0.1), want)
    assert fixed < 1e-5 and stock > 1e-3, (fixed, stock)


def test_exact_leaves_evaluation_and_the_logged_loss_alone(tmp_path):
    kind, k = "bert", 4
    data = family_rows(kind, 8)
    stock = family_trainer(tmp_path, family_model(kind), data, k)
    fixed = exact(family_trainer(tmp_path, family_model(kind), data, k))
    assert exact(fixed) is fixed  # a second call changes nothing
    assert fixed.evaluate(data)["eval_loss"] == pytest.approx(stock.evaluate(data)["eval_loss"], rel=1e-6)
    # The logged training loss of the window is its token mean (what the full batch reports).
    model = family_model(kind).eval()
    with torch.no_grad():
        batch = pad_collate(data)
        full = float(model(**batch)["loss"])
    assert fixed.train().training_loss == pytest.approx(full, rel=1e-5)


def test_exact_refuses_a_compute_loss_it_cannot_see_into(tmp_path):
    # An override is kept and checked: one that ignores num_items_in_batch is refused before the update.
    model = family_model("gpt2")
    before = [p.detach().clone() for p in model.parameters()]
    trainer = exact(family_trainer(tmp_path, model, family_rows("gpt2", 4), 2, cls=MeanComputeLoss))
    with pytest.raises(gg.GradguardError, match=r"MeanComputeLoss\.compute_loss \(.*test_integrations_transformers.py:\d+\)"
                       r" did not return a loss divided by its num_items_in_batch in window 1"):
        trainer.train()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))

    def mean_loss(outputs, labels, num_items_in_batch=None):
        return F.cross_entropy(outputs["logits"].reshape(-1, V), labels.reshape(-1), ignore_index=-100)

    trainer = family_trainer(tmp_path, family_model("gpt2"), family_rows("gpt2", 4), 2)
    trainer.compute_loss_func = mean_loss
    with pytest.raises(gg.GradguardError, match="compute_loss_func=.*mean_loss"):
        exact(trainer)


def test_exact_refuses_a_loss_that_is_not_the_token_mean_before_any_update(tmp_path):
    model = CustomLM(scale=2.0)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = exact(family_trainer(tmp_path, model, family_rows("custom", 8), 4))
    with pytest.raises(gg.GradguardError, match="CustomLM.s own loss .* is not the token-mean cross entropy"):
        trainer.train()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


# ------------------------------------------------------- several processes
def _ddp_rank(rank, world_size, kind, average):
    transformers.logging.set_verbosity_error()
    data = family_rows(kind, 2 * 4 * world_size)  # one window over both ranks: the reference's rows
    out = {}
    for fix in (False, True):
        trainer = family_trainer(tempfile.mkdtemp(), family_model(kind), data, 4,
                                 average_tokens_across_devices=average)
        trainer = exact(trainer) if fix else trainer
        trainer.train()
        out[fix] = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    return out


def _update_error(got, init, want):
    return max(float(((init[n] - got[n]).double() - want[n]).abs().max()) for n in want) / \
        max(float(w.abs().max()) for w in want.values())


@pytest.mark.parametrize("average", [True, False])
def test_exact_two_processes(average):
    kind = "gpt2"
    data = family_rows(kind, 16)
    want = family_reference(family_model(kind), kind, data)
    init = {n: p.detach() for n, p in family_model(kind).named_parameters()}
    for result in S.spawn(_ddp_rank, 2, kind=kind, average=average):
        assert _update_error(result[True], init, want) < 1e-5
        assert _update_error(result[False], init, want) > 1e-3


# ---------------------------------------------------------------- DeepSpeed
def _no_shm_build():
    """DeepSpeed compiles a shared-memory op on its first init (minutes on CPU); gloo does not need it."""
    pytest.importorskip("deepspeed")
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda *args, **kwargs: None


def _deepspeed_config(stage):
    # gradient_clipping defaults to 1.0 in DeepSpeed and would clip silently; a torch SGD is "untested" under ZeRO.
    return {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": 0.0,
            "zero_allow_untested_optimizer": True, "zero_optimization": {"stage": stage}}


def _deepspeed_rank(rank, world_size, kind, stage):
    _no_shm_build()
    transformers.logging.set_verbosity_error()
    data = family_rows(kind, 2 * 4 * world_size)
    out = {}
    for fix in (False, True):
        trainer = family_trainer(tempfile.mkdtemp(), family_model(kind), data, 4, deepspeed=_deepspeed_config(stage))
        trainer = exact(trainer) if fix else trainer
        model = trainer.model
        trainer.train()
        out[fix] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return out


@pytest.mark.parametrize("stage", [0, 3])
def test_exact_on_deepspeed_two_processes(stage):
    pytest.importorskip("deepspeed")
    kind = "bert"  # a loss-kwargs model whose loss never sees the count: K times too large on stock DeepSpeed
    data = family_rows(kind, 16)
    want = family_reference(family_model(kind), kind, data)
    init = {n: p.detach() for n, p in family_model(kind).named_parameters()}
    for result in S.spawn(_deepspeed_rank, 2, kind=kind, stage=stage):
        assert _update_error(result[True], init, want) < 1e-5
        assert _update_error(result[False], init, want) > 1.0


def _deepspeed_check(rank, world_size):
    _no_shm_build()
    transformers.logging.set_verbosity_error()
    data = family_rows("bert", 8)
    stock = check_trainer(family_trainer(tempfile.mkdtemp(), family_model("bert"), data, 4,
                                         deepspeed=_deepspeed_config(2)))
    fixed = check_trainer(exact(family_trainer(tempfile.mkdtemp(), family_model("bert"), data, 4,
                                               deepspeed=_deepspeed_config(2))))
    return stock.equivalent, stock.max_rel_diff, stock.causes, fixed.equivalent


def test_check_trainer_on_deepspeed_names_the_cause_and_the_fix(tmp_path):
    pytest.importorskip("deepspeed")
    data = family_rows("bert", 8)
    want = family_reference(family_model("bert"), "bert", data)
    measured = applied_error(family_trainer(tmp_path, family_model("bert"), data, 4), want)
    [(equivalent, diff, causes, fixed)] = S.spawn(_deepspeed_check, 1)
    assert not equivalent and diff == pytest.approx(measured, rel=1e-3)
    assert "On DeepSpeed" in causes[0] and "exact(trainer)" in causes[0]
    assert fixed


# --------------------------------------------------------------- watch, more
class ZeroGradInTrainingStep(transformers.Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        model.zero_grad()  # gradguard: ignore[GG102] (the bug under test: clears what the step is about to use)
        return loss


def test_watch_reports_a_zero_grad_in_training_step_at_its_line(tmp_path):
    # Llama: the stock Trainer is exact on it (stock GPT2 miscounts its targets: GG105, tested below).
    w = Watch(mode="record")
    trainer = family_trainer(tmp_path, family_model("llama"), family_rows("llama", 8), 1, max_steps=4)
    trainer.add_callback(w)
    trainer.train()
    assert w.findings == []  # the stock loop, K=1: nothing to report
    w = Watch(mode="record")
    trainer = family_trainer(tmp_path, family_model("llama"), family_rows("llama", 8), 1, max_steps=4,
                             cls=ZeroGradInTrainingStep)
    trainer.add_callback(w)
    trainer.train()
    _, first = inspect.getsourcelines(ZeroGradInTrainingStep.training_step)
    assert [(f.code, f.path, f.line) for f in w.findings] == [("GG102", __file__, first + 2)]


def test_watch_reports_a_zero_grad_in_training_step_of_a_short_accumulating_run(tmp_path):
    """K=2, 2 steps, float64 Llama: the Trainer's window runs every micro-batch into its step, so the first discard
    is reported (it needed three step intervals before); "raise" stops it before any update. The stock trainer
    (same model, K, steps): nothing."""
    data = family_rows("llama", 8)

    def run(cls, mode="record"):
        w = Watch(mode=mode)
        model = family_model("llama").double()
        trainer = family_trainer(tmp_path, model, data, 2, max_steps=2, cls=cls)
        trainer.add_callback(w)
        return w, trainer, model

    w, trainer, _ = run(transformers.Trainer)
    trainer.train()
    assert w.findings == []
    w, trainer, _ = run(ZeroGradInTrainingStep)
    trainer.train()
    _, first = inspect.getsourcelines(ZeroGradInTrainingStep.training_step)
    assert [(f.code, f.path, f.line) for f in w.findings] == [("GG102", __file__, first + 2)]
    w, trainer, model = run(ZeroGradInTrainingStep, "raise")
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(gg.GradguardError, match="GG102"):
        trainer.train()
    w.close()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_watch_reports_the_stock_gpt2_count_as_unequal_weighting(tmp_path):
    """Stock GPT2, K=4, rows masking their first position or not: the Trainer counts position 0, the loss never
    targets it. The watch reports GG105 with the measured factor; the controls (Llama, GPT2 with loss_type
    set, exact(GPT2)) are exact and get nothing."""
    k = 4
    data = family_rows("gpt2", 2 * k, seed=1)
    for r in data[::2]:
        r["labels"][0] = -100  # half the rows mask their first position: for them the Trainer's count is right
    counted = sum(int((r["labels"][1:] != -100).sum()) for r in data)
    given = sum(int((r["labels"] != -100).sum()) for r in data)
    assert counted != given

    def run(kind, fix=None):
        model = family_model(kind)
        if fix == "loss_type":
            model.loss_type = "ForCausalLM"
        want = family_reference(family_model(kind), kind, data)
        trainer = family_trainer(tmp_path, model, data, k)
        trainer = exact(trainer) if fix == "exact" else trainer
        w = Watch(mode="record")
        trainer.add_callback(w)
        return applied_error(trainer, want), w.findings

    err, findings = run("gpt2")
    assert err == pytest.approx(1 - counted / given, rel=1e-3)  # every gradient scaled by counted/given
    assert [f.code for f in findings] == ["GG105"]
    assert f"num_items_in_batch={given}" in findings[0].detail and f"{counted}/{given}" in findings[0].detail
    assert "model.loss_type = 'ForCausalLM'" in findings[0].detail
    for kind, fix in (("llama", None), ("gpt2", "loss_type"), ("gpt2", "exact")):
        err, findings = run(kind, fix)
        assert err < 1e-5 and findings == [], (kind, fix, err, findings)


class ConditionalReturn(transformers.Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # gradguard: ignore[GG301] (the bug under test)
        outputs = model(input_ids=inputs["input_ids"])
        logits = outputs["logits"][:, :-1]
        loss = F.cross_entropy(logits.reshape(-1, V), inputs["labels"][:, 1:].reshape(-1), ignore_index=-100)
        return (loss, outputs) if return_outputs else loss


def test_watch_points_at_the_line_that_makes_the_loss_not_the_return(tmp_path):
    w = Watch(mode="record")
    trainer = make_trainer(tmp_path, make_model("gpt2"), rows(ignore_first=True), cls=ConditionalReturn)
    trainer.model_accepts_loss_kwargs = False
    trainer.add_callback(w)
    trainer.train()
    _, first = inspect.getsourcelines(ConditionalReturn.compute_loss)
    assert [(f.code, f.path, f.line) for f in w.findings] == [("GG105", __file__, first + 3)]


def test_exact_changes_nothing_else_on_a_trainer_that_was_exact(tmp_path):
    """Llama divides by the count already: with dropout, AdamW, a warm-up schedule and clipping, exact() must
    reproduce the stock run (same random numbers drawn, same optimizer and schedule, same logged loss)."""
    data = family_rows("llama", 16)

    def run(fix):
        torch.manual_seed(0)
        model = make_model("llama", dropout=0.3)
        trainer = family_trainer(tmp_path, model, data, 4, max_steps=2, optim="adamw_torch", learning_rate=1e-2,
                                 lr_scheduler_type="linear", warmup_steps=1, max_grad_norm=0.5)
        trainer = exact(trainer) if fix else trainer
        loss = trainer.train().training_loss
        return [p.detach().clone() for p in model.parameters()], loss, torch.get_rng_state()

    (stock, stock_loss, stock_rng), (fixed, fixed_loss, fixed_rng) = run(False), run(True)
    assert torch.equal(stock_rng, fixed_rng)
    assert fixed_loss == pytest.approx(stock_loss, rel=1e-6)
    assert max(float((a - b).abs().max()) for a, b in zip(stock, fixed)) < 1e-5


class LossOnly(nn.Module):
    """A model whose forward requires labels and returns its loss alone (no logits)."""

    def __init__(self):
        super().__init__()
        self.inner = CustomLM()

    def forward(self, input_ids, labels, attention_mask=None):
        return {"loss": self.inner(input_ids, labels=labels)["loss"]}


def test_check_trainer_on_a_model_that_needs_labels_and_returns_no_logits(tmp_path):
    data = family_rows("custom", 8)
    torch.manual_seed(0)
    model = LossOnly()
    want = {f"inner.{n}": g for n, g in family_reference(model.inner, "custom", data).items()}
    measured = applied_error(family_trainer(tmp_path, copy.deepcopy(model), data, 4), want)
    report = check_trainer(family_trainer(tmp_path, copy.deepcopy(model), data, 4))
    assert not report.equivalent and report.max_rel_diff == pytest.approx(measured, rel=1e-3)
    with pytest.raises(gg.GradguardError, match="without 'logits'"):
        exact(family_trainer(tmp_path, copy.deepcopy(model), data, 4)).train()


class LogitsLM(nn.Module):
    """A model that returns logits only: the trainer subclass's compute_loss makes the loss."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.head = nn.Linear(16, V)

    def forward(self, input_ids, labels=None, **kwargs):
        return {"logits": self.head(torch.tanh(self.emb(input_ids)))}


def _ce(model, inputs, shift, reduction):
    out = model(input_ids=inputs["input_ids"])
    logits, labels = out["logits"], inputs["labels"]
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100, reduction=reduction), out


class SumOverCount(transformers.Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, out = _ce(model, inputs, False, "sum")
        loss = loss / num_items_in_batch
        return (loss, out) if return_outputs else loss


class MeanIgnoringCount(transformers.Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # gradguard: ignore[GG301] (the bug under test)
        loss, out = _ce(model, inputs, False, "mean")
        return (loss, out) if return_outputs else loss


class ShiftedSumOverCount(transformers.Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, out = _ce(model, inputs, True, "sum")
        loss = loss / num_items_in_batch
        return (loss, out) if return_outputs else loss


@pytest.mark.parametrize("cls, shifted, expected, cause", [
    pytest.param(SumOverCount, False, True, None, id="sum-over-count"),
    pytest.param(MeanIgnoringCount, False, False, "MeanIgnoringCount.compute_loss ignores num_items_in_batch",
                 id="mean-ignoring-count"),
    pytest.param(ShiftedSumOverCount, True, False, "ShiftedSumOverCount.compute_loss shifts labels",
                 id="shifted-sum-over-trainer-count"),
])
def test_check_trainer_when_the_model_returns_no_loss_and_compute_loss_makes_it(tmp_path, cls, shifted, expected,
                                                                                 cause):
    # Before, the reference was the model's own loss or the unshifted cross entropy of its logits, never the
    # override's: a wrong verdict for a shifted override and, in older versions, KeyError: 'loss'.
    data = rows()
    measured = measured_rel_diff(tmp_path, "logits", data, shifted, cls)
    report = check_trainer(make_trainer(tmp_path, make_model("logits"), data, cls=cls))
    assert report.equivalent is expected and (measured < 1e-4) is expected, (report, measured)
    if expected:
        assert report.max_rel_diff < 1e-4 and report.causes == []
    else:
        assert report.max_rel_diff == pytest.approx(measured, rel=1e-3)
        assert len(report.causes) == 1 and cause in report.causes[0] and "Fix:" in report.causes[0], report.causes
    # The window is the whole (shuffled) data set: its target count, shifted or not, is the loss's.
    assert sum(report.items) == int((torch.stack([r["labels"] for r in data])[:, int(shifted):] != -100).sum())


def test_exact_refuses_an_override_on_a_model_that_returns_no_loss(tmp_path):
    model = make_model("logits")
    before = [p.detach().clone() for p in model.parameters()]
    trainer = exact(make_trainer(tmp_path, model, rows(), cls=SumOverCount))
    with pytest.raises(gg.GradguardError, match=r"LogitsLM returned no loss for a batch with labels"):
        trainer.train()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


class UsesSelfModel(transformers.Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return _ce(self.model, inputs, False, "sum")[0] / num_items_in_batch  # not the model it was given


def test_check_trainer_says_why_it_cannot_judge_an_override_that_fails_on_its_reference(tmp_path):
    data = rows()
    trainer = make_trainer(tmp_path, make_model("logits"), data, cls=UsesSelfModel)
    with pytest.raises(gg.GradguardError, match=r"cannot judge.*UsesSelfModel\.compute_loss.*not self\.model"):
        check_trainer(trainer)


def _sum_over_count(outputs, labels, num_items_in_batch=None):
    return F.cross_entropy(outputs["logits"].reshape(-1, V), labels.reshape(-1), ignore_index=-100,
                           reduction="sum") / num_items_in_batch


def _mean_ignoring_count(outputs, labels, num_items_in_batch=None):
    return F.cross_entropy(outputs["logits"].reshape(-1, V), labels.reshape(-1), ignore_index=-100)


@pytest.mark.parametrize("fn, expected", [(_sum_over_count, True), (_mean_ignoring_count, False)])
def test_check_trainer_with_a_compute_loss_func_on_a_model_that_returns_no_loss(tmp_path, fn, expected):
    # Before, Trainer.compute_loss popped the labels from a batch the check then reused: the user's function
    # crashed on labels=None.
    data = rows()
    model = make_model("logits")
    want = reference_grads(model, data, shifted=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = make_trainer(tmp_path, model, data, lr=1.0)
    trainer.compute_loss_func = fn
    trainer.train()
    measured = max(float(((before[n] - p.detach()).double() - want[n]).abs().max()) for n, p in model.named_parameters())
    measured /= max(float(w.abs().max()) for w in want.values())
    trainer = make_trainer(tmp_path, make_model("logits"), data)
    trainer.compute_loss_func = fn
    report = check_trainer(trainer)
    assert report.equivalent is expected and (measured < 1e-4) is expected, (report, measured)
    if not expected:
        assert report.max_rel_diff == pytest.approx(measured, rel=1e-3)
        assert "compute_loss_func ignores num_items_in_batch" in report.causes[0], report.causes
