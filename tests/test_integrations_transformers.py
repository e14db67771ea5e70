"""``check_trainer`` and ``Watch`` with real HF ``Trainer`` runs on tiny models built from configs (no download).

Each verdict is compared with a gradient measured independently of gradguard:
the trainer itself takes one SGD step with lr=1 and no clipping (so the
parameter change is minus the gradient it applied), against the float64
gradient of the token-mean loss over the same items computed here by hand.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

transformers = pytest.importorskip("transformers")

import gradguard as gg  # noqa: E402
from gradguard.integrations.transformers import Watch, check_trainer  # noqa: E402

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
