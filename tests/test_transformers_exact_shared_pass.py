"""``exact(trainer)`` takes its token sum from the log-softmax the model's own loss computed, and checks it as before.

The token sum ``exact()`` backpropagates is a gather from the log-probabilities that the model's loss computed
(read from its autograd graph, where that graph shows a log-softmax of the returned logits through reshapes
and one float upcast), not a second pass over the logits: one log-softmax per micro-batch, as the stock
Trainer. What the model's loss does with them is still checked on every micro-batch against that token
sum: a loss that ignores another label, smooths, shifts otherwise or sums is refused before any update, with
the shared pass in use (asserted here, so these tests cannot pass by the fallback), and the same model with
the token-mean loss is made exact (within float32 round-off of the float64 reference built in the test).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

transformers = pytest.importorskip("transformers")

import gradguard as gg  # noqa: E402
from gradguard.integrations.transformers import exact  # noqa: E402
from gradguard.integrations.transformers.exact import _saved_log_probs  # noqa: E402

from test_transformers_conformance import (  # noqa: E402
    V, Collate, applied_error, family_model, family_rows, make_trainer, reference)

transformers.logging.set_verbosity_error()

# Slow as a whole, as test_transformers_conformance: the integration's import (~2.8 s of CPU) is more than these
# tests' own time; tests/conftest.py then skips collecting the module in the fast loop.
pytestmark = pytest.mark.slow


# ------------------------------------------------------------------ what the graph gives
def _logits(dtype=torch.float32):
    w = torch.randn(8, V, dtype=torch.float32, requires_grad=True)
    return (torch.randn(2, 5, 8) @ w).to(dtype)


def test_the_saved_log_softmax_is_the_logits_own():
    logits = _logits()
    labels = torch.randint(0, V, (2, 5))
    loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
    logp = _saved_log_probs(loss, logits)
    assert logp is not None and logp.grad_fn is not None
    assert torch.equal(logp.reshape(-1, V), F.log_softmax(logits.detach().reshape(-1, V), dim=-1))
    # Half logits upcast once, as the models' own losses do: float32 log-probabilities of those logits.
    half = _logits(torch.bfloat16)
    loss = F.cross_entropy(half.float().reshape(-1, V), labels.reshape(-1))
    logp = _saved_log_probs(loss, half)
    assert logp is not None and logp.dtype == torch.float32
    assert torch.equal(logp.reshape(-1, V), F.log_softmax(half.detach().float().reshape(-1, V), dim=-1))


@pytest.mark.parametrize("other", [
    pytest.param(lambda x: (x / 2.0).reshape(-1, V), id="temperature"),
    pytest.param(lambda x: x[:, :-1].reshape(-1, V), id="sliced"),
    pytest.param(lambda x: x.to(torch.bfloat16).float().reshape(-1, V), id="rounded-through-bf16"),
    pytest.param(lambda x: x.transpose(0, 1).reshape(-1, V), id="rows-reordered"),
    pytest.param(lambda x: (x + 0.0).reshape(-1, V), id="another-op"),
])
def test_a_log_softmax_of_anything_but_the_logits_is_not_taken(other):
    """Any op that moves values or rows between the logits and the log-softmax: the caller computes its own."""
    logits = _logits()
    rows = other(logits)
    loss = F.cross_entropy(rows, torch.randint(0, V, (rows.shape[0],)))
    assert _saved_log_probs(loss, logits) is None
    # The control: the same loss on the logits themselves is taken.
    assert _saved_log_probs(F.cross_entropy(logits.reshape(-1, V), torch.randint(0, V, (10,))), logits) is not None


def test_a_log_softmax_over_another_dimension_is_not_taken():
    logits = _logits()
    square = logits[..., :5].reshape(2, 5, 5)  # not the logits (a slice): refused on that alone
    assert _saved_log_probs(F.log_softmax(square, dim=1).sum(), logits) is None
    assert _saved_log_probs(F.log_softmax(logits, dim=1).sum(), logits) is None
    assert _saved_log_probs(F.log_softmax(logits, dim=-1).sum(), logits) is not None  # the control


# ------------------------------------------------------------------ one pass, as the stock Trainer
def _log_softmax_calls(trainer, k):
    """Forward log-softmax calls in one window after a first one, run as ``train()`` runs it."""
    from torch.profiler import ProfilerActivity, profile

    def window():
        model = trainer.model
        model.train()
        batches, n = trainer.get_batch_samples(iter(trainer.get_train_dataloader()), k, trainer.args.device)
        trainer.current_gradient_accumulation_steps = len(batches)
        for b in batches:
            trainer.training_step(model, b, n)
        return n

    window()  # the first window learns the shift (forwards without grad)
    trainer.model.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        n = window()
    calls = sum(e.count for e in prof.key_averages() if e.key == "aten::_log_softmax")
    return calls, n


@pytest.mark.parametrize("kind", ["llama", "gpt2", "bert", "t5"])
def test_exact_runs_one_log_softmax_per_micro_batch_as_the_stock_trainer(tmp_path, kind):
    k = 2
    data = family_rows(kind, 2 * k)
    stock, _ = _log_softmax_calls(make_trainer(tmp_path, family_model(kind), data, k, Collate(kind)), k)
    trainer = exact(make_trainer(tmp_path, family_model(kind), data, k, Collate(kind)))
    fixed, n = _log_softmax_calls(trainer, k)
    assert stock == k and fixed == stock, (stock, fixed)
    # And the gradient of that window is the float64 full-batch one (the window's .grad, SGD not stepped).
    want = reference(family_model(kind), kind, data)
    got = {name: p.grad for name, p in trainer.model.named_parameters() if p.grad is not None}
    err = max(float((got[name].double() - want[name]).abs().max()) for name in want)
    assert err / max(float(w.abs().max()) for w in want.values()) < 1e-5


# ------------------------------------------------------------------ the check is as strong as before
class OwnLossLM(nn.Module):
    """A custom module whose loss is computed from ``F.cross_entropy`` on its logits, in one of several ways."""

    def __init__(self, way="mean"):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(V, 16)
        self.head = nn.Linear(16, V)
        self.way = way

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.head(torch.tanh(self.emb(input_ids)))
        loss = None
        if labels is not None:
            flat, targets = logits.reshape(-1, V), labels.reshape(-1)
            if self.way == "ignores-0":
                loss = F.cross_entropy(flat, targets.masked_fill(targets == 0, -100))
            elif self.way == "smooths":
                loss = F.cross_entropy(flat, targets, label_smoothing=0.1)
            elif self.way == "sums":
                loss = F.cross_entropy(flat, targets, reduction="sum")
            elif self.way == "shifts-by-2":
                loss = F.cross_entropy(flat, F.pad(labels, (0, 2), value=-100)[..., 2:].reshape(-1))
            else:
                loss = F.cross_entropy(flat, targets)
        return {"loss": loss, "logits": logits}


def _rows_with_a_zero_label(n):
    rows = family_rows("custom", n)
    for r in rows[1::2]:
        r["labels"] = r["labels"].clone()
        r["labels"][-1] = 0  # a label the "ignores-0" loss drops; the others train on it
    return rows


@pytest.mark.parametrize("way", ["ignores-0", "smooths", "sums", "shifts-by-2"])
def test_a_loss_that_is_not_the_token_mean_is_refused_with_the_shared_pass(tmp_path, way):
    k = 2
    data = _rows_with_a_zero_label(2 * k)
    model = OwnLossLM(way)
    batch = Collate("custom")(data[:2])
    out = model(**batch)
    assert _saved_log_probs(out["loss"], out["logits"]) is not None  # the shared pass is what is tested
    before = [p.detach().clone() for p in model.parameters()]
    trainer = exact(make_trainer(tmp_path, model, data, k, Collate("custom")))
    with pytest.raises(gg.GradguardError, match=r"OwnLossLM's own loss on micro-batch \d of window 1 .* is not the "
                                                r"token-mean cross entropy .* nothing was updated"):
        trainer.train()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_the_token_mean_loss_through_the_shared_pass_is_exact(tmp_path):
    """The control of the test above: the same module and rows with the token-mean loss; the stock run is off."""
    k = 2
    data = _rows_with_a_zero_label(2 * k)
    want = reference(OwnLossLM(), "custom", data)
    assert applied_error(exact(make_trainer(tmp_path, OwnLossLM(), data, k, Collate("custom"))), want) < 1e-5
    assert applied_error(make_trainer(tmp_path, OwnLossLM(), data, k, Collate("custom")), want) > 1e-3
