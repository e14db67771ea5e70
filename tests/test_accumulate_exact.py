"""Accumulated gradient == float64 full-batch gradient, for any split; the naive schemes are not.

Every property case carries its own negative control: on the same data, the
divide-by-N scheme the frameworks use must be off by more than 1e-3.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F

import gradguard as gg
from reference import IGNORE, CaptureOptimizer, TiedEmbeddingLM, full_batch_grads, rel_error, token_ce

EXACT = 1e-10
WRONG = 1e-3


def _model(kind: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if kind == "linear":
        model = nn.Linear(5, 3)
    elif kind == "mlp":
        model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    else:
        model = TiedEmbeddingLM()
    return model.double()


def _data(kind: str, n: int, seed: int, ignore_frac: float):
    """Inputs and targets; LM targets have a per-sequence share of ignored tokens."""
    g = torch.Generator().manual_seed(seed)
    if kind == "tied":
        x = torch.randint(0, 11, (n, 4), generator=g)
        y = torch.randint(0, 11, (n, 4), generator=g)
        mask = torch.rand(n, 4, generator=g) < ignore_frac
        mask[0, 0] = False  # at least one counted token in the batch
        y[mask] = IGNORE
        return x, y
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=g)
    mask = torch.rand(n, generator=g) < ignore_frac
    mask[0] = False
    y[mask] = IGNORE
    return x, y


def _loss(model, x, y, reduction):
    return token_ce(model(x), y, reduction=reduction)


def _count(y) -> int:
    return int((y != IGNORE).sum())


def _split(n: int, cuts):
    bounds = sorted(set(c for c in cuts if 0 < c < n))
    edges = [0, *bounds, n]
    return [(a, b) for a, b in zip(edges, edges[1:])]


split_cases = st.integers(min_value=2, max_value=24).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.integers(1, n - 1), min_size=1, max_size=n - 1))
)


@pytest.mark.slow
@settings(max_examples=60)
@given(
    kind=st.sampled_from(["linear", "mlp", "tied"]),
    case=split_cases,
    reduction=st.sampled_from(["mean", "sum"]),
    ignore_frac=st.sampled_from([0.0, 0.3, 0.7]),
    count_as_tensor=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_accumulated_gradient_equals_full_batch(kind, case, reduction, ignore_frac, count_as_tensor, seed):
    n, cuts = case
    model = _model(kind, seed)
    x, y = _data(kind, n, seed, ignore_frac)
    parts = _split(n, cuts)
    total = _count(y)

    # Reference: plain PyTorch, full batch, float64. For "sum" the target is the per-item mean too.
    full = full_batch_grads(model, _loss(model, x, y, "mean"))

    capture = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(capture, steps=len(parts))
    stepped = []
    for a, b in parts:
        c = _count(y[a:b])
        acc.backward(_loss(model, x[a:b], y[a:b], reduction), count=torch.tensor(c) if count_as_tensor else c, reduction=reduction)
        stepped.append(acc.step())
    assert stepped == [False] * (len(parts) - 1) + [True]
    assert rel_error(capture.captured[0], full) < EXACT
    assert acc.loss == pytest.approx(_loss(model, x, y, "mean").item(), rel=EXACT)
    assert all(p.grad is None for p in model.parameters()), "gradients are cleared after the step"

    # Negative control on the same data: each micro-batch's loss divided by the number of micro-batches.
    counts = [_count(y[a:b]) for a, b in parts]
    naive_capture = CaptureOptimizer(model.parameters())
    for a, b in parts:
        (_loss(model, x[a:b], y[a:b], reduction) / len(parts)).backward()
    naive_capture.step()
    if reduction == "sum" or len(set(counts)) > 1:
        # Mean of means (unequal counts) or sum over N (sum reduction): measurably wrong.
        if reduction == "sum" and total == len(parts):
            return  # sum / N happens to equal sum / total here
        assert rel_error(naive_capture.captured[0], full) > WRONG


def test_equal_counts_skip_the_extra_pass(monkeypatch):
    """With equal counts in a full window, loss/steps is already exact: no normalising multiply runs."""
    model = _model("mlp", 0)
    x, y = _data("mlp", 12, 0, 0.0)
    calls = []
    real = torch._foreach_mul_
    monkeypatch.setattr(torch, "_foreach_mul_", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    capture = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(capture, steps=3)
    for a in (0, 4, 8):
        acc.backward(_loss(model, x[a : a + 4], y[a : a + 4], "mean"), count=4)
        acc.step()
    assert calls == []
    assert rel_error(capture.captured[0], full_batch_grads(model, _loss(model, x, y, "mean"))) < EXACT
    # Unequal counts do need it.
    acc = gg.Accumulator(capture, steps=2)
    for a, b in ((0, 5), (5, 12)):
        acc.backward(_loss(model, x[a:b], y[a:b], "mean"), count=b - a)
        acc.step()
    assert calls == [1]
    assert rel_error(capture.captured[1], full_batch_grads(model, _loss(model, x, y, "mean"))) < EXACT


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_weight_seeds_the_pass_as_multiplying_the_loss_would(dtype):
    """The Accumulator seeds the backward pass with a micro-batch's weight instead of multiplying
    the loss by it: the gradient is the same as ``(loss * weight).backward()`` bit for bit, in
    every dtype (the weight reaches the graph rounded to the loss's dtype either way)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 1)).to(dtype)
    twin = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 1)).to(dtype)
    twin.load_state_dict(model.state_dict())
    x, y = torch.randn(5, 5).to(dtype), torch.randn(5, 1).to(dtype)
    acc = gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.1), steps=3)
    acc.backward(F.mse_loss(model(x), y), count=5)  # weight 5 / (5 * 3) = 1/3
    (F.mse_loss(twin(x), y) * (1 / 3)).backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p.grad, q.grad)
    # Negative control: the unweighted gradient differs (the comparison can fail).
    twin.zero_grad()
    F.mse_loss(twin(x), y).backward()
    assert not all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), twin.parameters()))


def test_count_none_weighs_micro_batches_equally():
    """count=None: the seeds' divide-by-N, which is the full batch when sizes are equal."""
    model = _model("linear", 1)
    x, y = _data("linear", 12, 1, 0.0)
    capture = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(capture, steps=3)
    for a in (0, 4, 8):
        acc.backward(F.cross_entropy(model(x[a : a + 4]), y[a : a + 4]))
        acc.step()
    assert rel_error(capture.captured[0], full_batch_grads(model, F.cross_entropy(model(x), y))) < EXACT


@pytest.mark.parametrize("set_to_none", [True, False])
def test_flush_steps_the_partial_window_with_true_weights(set_to_none):
    """10 micro-batches, steps=4: windows of 4, 4 and 2; the last one stepped by flush() exactly."""
    model = _model("tied", 3)
    x, y = _data("tied", 20, 3, 0.3)
    parts = [(i, i + 2) for i in range(0, 20, 2)]
    capture = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(capture, steps=4, set_to_none=set_to_none)
    for a, b in parts:
        acc.backward(_loss(model, x[a:b], y[a:b], "mean"), count=_count(y[a:b]))
        acc.step()
    assert len(capture.captured) == 2 and acc.micro_step == 2
    assert acc.flush() is True
    assert acc.flush() is False, "nothing pending after a flush"
    windows = [(0, 8), (8, 16), (16, 20)]
    for got, (a, b) in zip(capture.captured, windows):
        assert rel_error(got, full_batch_grads(model, _loss(model, x[a:b], y[a:b], "mean"))) < EXACT
    for p in model.parameters():
        assert (p.grad is None) if set_to_none else bool((p.grad == 0).all())

    # Negative control: the partial window divided by steps (4) instead of its 2 micro-batches.
    for p in model.parameters():
        p.grad = None
    for a, b in parts[-2:]:
        (_loss(model, x[a:b], y[a:b], "mean") / 4).backward()
    under = [p.grad for p in model.parameters()]
    assert rel_error(under, full_batch_grads(model, _loss(model, x[16:20], y[16:20], "mean"))) > 0.1


def test_zero_count_micro_batch_contributes_nothing_and_no_nan():
    model = _model("tied", 4)
    x, y = _data("tied", 9, 4, 0.2)
    y[3:6] = IGNORE  # micro-batch 2: every target ignored, its mean loss is 0/0 = nan
    assert torch.isnan(_loss(model, x[3:6], y[3:6], "mean"))
    capture = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(capture, steps=3)
    for a in (0, 3, 6):
        acc.backward(_loss(model, x[a : a + 3], y[a : a + 3], "mean"), count=torch.tensor(_count(y[a : a + 3])))
        acc.step()
    got = capture.captured[0]
    assert all(torch.isfinite(g).all() for g in got if g is not None)
    assert rel_error(got, full_batch_grads(model, _loss(model, x, y, "mean"))) < EXACT
    assert acc.loss == pytest.approx(_loss(model, x, y, "mean").item(), rel=EXACT)


def test_window_with_zero_items_does_not_step_and_leaves_no_gradient():
    model = _model("linear", 5)
    x, y = _data("linear", 4, 5, 0.0)
    y[:] = IGNORE
    capture = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(capture, steps=2, set_to_none=False)
    for a in (0, 2):
        acc.backward(_loss(model, x[a : a + 2], y[a : a + 2], "mean"), count=0)
        assert acc.step() is False
    assert capture.captured == []
    assert all(p.grad is None for p in model.parameters())
    assert acc.optimizer_steps == 0 and acc.skipped_windows == 1


def test_parameters_without_gradient_keep_none():
    model = nn.ModuleDict({"used": nn.Linear(3, 1), "unused": nn.Linear(3, 1)}).double()
    capture = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(capture, steps=2)
    for n in (2, 3):
        acc.backward(model["used"](torch.randn(n, 3, dtype=torch.float64)).pow(2).mean(), count=n)
        acc.step()
    got = dict(zip([n for n, _ in model.named_parameters()], capture.captured[0]))
    assert got["unused.weight"] is None and got["unused.bias"] is None
    assert got["used.weight"] is not None


def test_accumulated_update_matches_full_batch_with_adamw_and_scheduler():
    """End to end: parameters after several optimizer steps equal the full-batch run's."""
    torch.manual_seed(7)
    base = TiedEmbeddingLM().double()
    data = [_data("tied", 10, s, 0.4) for s in range(4)]

    def run(accumulate: bool):
        model = TiedEmbeddingLM().double()
        model.load_state_dict(base.state_dict())
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        acc = gg.Accumulator(opt, steps=3, scheduler=sched) if accumulate else None
        for x, y in data:
            if accumulate:
                for a, b in ((0, 1), (1, 6), (6, 10)):
                    acc.backward(_loss(model, x[a:b], y[a:b], "mean"), count=_count(y[a:b]))
                    acc.step()
            else:
                opt.zero_grad()
                _loss(model, x, y, "mean").backward()
                opt.step()
                sched.step()
        return model, sched

    got, sched_got = run(True)
    want, sched_want = run(False)
    assert sched_got.last_epoch == sched_want.last_epoch == 4
    for p, q in zip(got.parameters(), want.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)


def test_clipping_acts_on_the_exact_window_gradient():
    model = _model("mlp", 8)
    x, y = _data("mlp", 10, 8, 0.0)
    before = [p.detach().clone() for p in model.parameters()]
    full = full_batch_grads(model, _loss(model, x, y, "mean"))
    max_norm = 0.05
    norm = torch.sqrt(sum((g**2).sum() for g in full))
    assert norm > max_norm  # the clip is active, so the test can fail
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    acc = gg.Accumulator(opt, steps=2, max_grad_norm=max_norm)
    for a, b in ((0, 3), (3, 10)):
        acc.backward(_loss(model, x[a:b], y[a:b], "mean"), count=b - a)
        acc.step()
    torch.testing.assert_close(acc.grad_norm, norm, rtol=1e-10, atol=0)
    for p, p0, g in zip(model.parameters(), before, full):
        torch.testing.assert_close(p0 - p.detach(), g * (max_norm / (norm + 1e-6)), rtol=1e-8, atol=1e-12)


def test_microbatch_context_is_a_no_op_on_one_process():
    model = _model("linear", 9)
    x, y = _data("linear", 6, 9, 0.0)
    capture = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(capture, steps=2, model=model)
    for a, b in ((0, 2), (2, 6)):
        with acc.microbatch():
            acc.backward(_loss(model, x[a:b], y[a:b], "mean"), count=b - a)
        acc.step()
    assert rel_error(capture.captured[0], full_batch_grads(model, _loss(model, x, y, "mean"))) < EXACT
