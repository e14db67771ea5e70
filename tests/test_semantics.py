"""grads_per_step (the seed exercise) and check_equivalence."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import gradguard as gg
from reference import IGNORE, TiedEmbeddingLM, token_ce


def test_grads_per_step_shows_accumulation_and_clearing():
    x = torch.ones(3, requires_grad=True)
    assert gg.grads_per_step(x, 3, clear=False) == [[2.0] * 3, [4.0] * 3, [6.0] * 3]
    assert gg.grads_per_step(x, 3) == [[2.0] * 3] * 3
    assert gg.grads_per_step(x, 0) == []
    x.grad = torch.full((3,), 5.0)  # whatever was there before does not leak into the exercise
    assert gg.grads_per_step(x, 2, clear=False) == [[2.0] * 3, [4.0] * 3]


def test_grads_per_step_custom_fn_matches_autograd():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    got = gg.grads_per_step(x, 2, fn=lambda t: (t**2).sum(), clear=False)
    want = (2 * torch.tensor([1.0, 2.0, 3.0])).tolist()
    assert got == [want, [2 * w for w in want]]


@pytest.mark.parametrize("x, steps", [(torch.ones(3), 1), (torch.ones(3, requires_grad=True) * 2, 1), (torch.ones(3, requires_grad=True), -1)])
def test_grads_per_step_bad_input(x, steps):
    with pytest.raises(gg.GradguardError):
        gg.grads_per_step(x, steps)


def _lm_loss(model, batch):
    x, y = batch
    return token_ce(model(x), y)


def _lm_batch(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 11, (n, 5), generator=g)
    y = torch.randint(0, 11, (n, 5), generator=g)
    y[torch.rand(n, 5, generator=g) < 0.4] = IGNORE
    return x, y


def test_check_equivalence_exact_with_token_counts_and_naive_is_not():
    torch.manual_seed(0)
    model = TiedEmbeddingLM()
    report = gg.check_equivalence(model, _lm_loss, _lm_batch(), splits=[1, 4, 7], count_fn=lambda b: (b[1] != IGNORE).sum())
    assert report.equivalent and report.max_rel_diff < 1e-10 and report.causes == []
    assert report.naive_max_rel_diff > 1e-3
    assert "equivalent" in str(report)


def test_check_equivalence_counting_sequences_instead_of_tokens_is_reported():
    torch.manual_seed(0)
    report = gg.check_equivalence(TiedEmbeddingLM(), _lm_loss, _lm_batch(), splits=3)
    assert not report.equivalent
    assert report.causes[0].startswith("no count_fn") and "count_fn=" in report.causes[0]
    # A count_fn that counts sequences anyway: the loss is then not an additive mean over what it counts.
    report = gg.check_equivalence(TiedEmbeddingLM(), _lm_loss, _lm_batch(), splits=3, count_fn=lambda b: len(b[0]))
    assert any("not an additive mean over the counted items" in c for c in report.causes)


@pytest.mark.slow
def test_check_equivalence_names_batchnorm():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    report = gg.check_equivalence(model, lambda m, b: F.mse_loss(m(b[0]), b[1]), (x, y), splits=4)
    assert not report.equivalent
    assert any("BatchNorm" in c and "1" in c for c in report.causes)
    # The user's model is untouched: running statistics and .grad as they were.
    assert torch.equal(model[1].running_mean, torch.zeros(8)) and model[0].weight.grad is None
    # The same model in eval mode is exact.
    model.eval()
    assert gg.check_equivalence(model, lambda m, b: F.mse_loss(m(b[0]), b[1]), (x, y), splits=4).equivalent


def test_check_equivalence_rejects_bad_splits():
    model = nn.Linear(2, 1)
    batch = (torch.randn(4, 2), torch.randn(4, 1))
    loss = lambda m, b: F.mse_loss(m(b[0]), b[1])
    with pytest.raises(gg.GradguardError, match="summing to the batch size 4"):
        gg.check_equivalence(model, loss, batch, splits=[1, 2])
    with pytest.raises(gg.GradguardError, match="does not fit"):
        gg.check_equivalence(model, loss, batch, splits=5)


class _DropoutLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm, self.drop = TiedEmbeddingLM(), nn.Dropout(0.3)

    def forward(self, x):
        return self.lm.out(self.drop(self.lm.mlp(self.lm.emb(x))))


@pytest.mark.slow
def test_check_equivalence_names_a_missing_count_fn_before_dropout():
    torch.manual_seed(0)
    model = _DropoutLM()
    report = gg.check_equivalence(model, _lm_loss, _lm_batch(), splits=[2, 10])
    assert not report.equivalent
    assert report.causes[0].startswith("no count_fn")
    assert not any("dropout" in c for c in report.causes)  # with p=0 the split is still off: not dropout's doing
    # With the right counts it is exact, dropout and all: the same seed draws the same masks, row by row.
    report = gg.check_equivalence(model, _lm_loss, _lm_batch(), splits=[2, 10], count_fn=lambda b: (b[1] != IGNORE).sum())
    assert report.equivalent and report.causes == []


@pytest.mark.parametrize("loss_fn, message", [
    (lambda out, target, weight: (out - target).pow(2).mean(), r"cannot be called with \(model, micro_batch\)"),
    (nn.MSELoss(), r"calling loss_fn\(model, micro_batch\) failed"),
    (lambda m, b: m(b[0]), r"returned a tensor of shape \(4, 1\)"),
])
def test_check_equivalence_wrong_loss_fn_gets_one_clear_error(loss_fn, message):
    model = nn.Linear(2, 1)
    batch = (torch.randn(4, 2), torch.randn(4, 1))
    with pytest.raises(gg.GradguardError, match=message) as info:
        gg.check_equivalence(model, loss_fn, batch, splits=2)
    assert "loss_fn(model, micro_batch)" in str(info.value)
