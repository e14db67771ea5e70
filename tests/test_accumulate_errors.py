"""Bad input gets a GradguardError naming the value, and leaves the state as it was."""

import math

import pytest
import torch
from torch import nn

import gradguard as gg
from reference import CaptureOptimizer


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=3)
    x = torch.randn(4, 3, dtype=torch.float64)
    acc.backward(model(x).pow(2).mean(), count=4)  # one good micro-batch in flight
    acc.step()
    return model, opt, acc, x


def _snapshot(model, acc):
    return [p.grad.clone() for p in model.parameters()], acc.state_dict()


def _assert_unchanged(model, acc, snap):
    grads, sd = snap
    for p, g in zip(model.parameters(), grads):
        assert torch.equal(p.grad, g)
    now = acc.state_dict()
    for key in ("micro", "has_backward", "counted", "ref", "total", "optimizer_steps"):
        assert now[key] == sd[key], key


@pytest.mark.parametrize(
    "make_loss, kwargs, message",
    [
        (lambda m, x: m(x).pow(2), {"count": 4}, r"scalar \(0-dim\) tensor, got shape \(4, 1\)"),
        (lambda m, x: m(x).pow(2).mean().detach(), {"count": 4}, "does not require grad"),
        (lambda m, x: 1.5, {}, "must be a scalar torch.Tensor, got float"),
        (lambda m, x: m(x).pow(2).mean(), {"count": -1}, r"count must be a finite number >= 0.*-1"),
        (lambda m, x: m(x).pow(2).mean(), {"count": torch.tensor(-2)}, r">= 0.*-2"),
        (lambda m, x: m(x).pow(2).mean(), {"count": math.nan}, "finite"),
        (lambda m, x: m(x).pow(2).mean(), {"count": True}, "count must be an int"),
        (lambda m, x: m(x).pow(2).mean(), {"count": "4"}, "count must be an int"),
        (lambda m, x: m(x).pow(2).mean(), {"count": torch.ones(2)}, "0-dim tensor"),
        (lambda m, x: m(x).pow(2).mean(), {"count": torch.tensor([4])}, r"0-dim tensor, got a tensor of shape \(1,\)"),
        (lambda m, x: m(x).pow(2).mean(), {"count": None}, "pass a count for every micro-batch"),
        (lambda m, x: m(x).pow(2).mean(), {"count": 4, "reduction": "none"}, "reduction must be 'mean' or 'sum'"),
    ],
)
def test_bad_backward_raises_and_changes_nothing(setup, make_loss, kwargs, message):
    model, opt, acc, x = setup
    snap = _snapshot(model, acc)
    with pytest.raises(gg.GradguardError, match=message):
        acc.backward(make_loss(model, x), **kwargs)
    _assert_unchanged(model, acc, snap)


@pytest.mark.parametrize("factor, message", [(math.nan, "loss is nan at micro-batch 1"), (math.inf, "loss is inf")])
def test_raise_early_refuses_a_nonfinite_loss_before_it_touches_grad(setup, factor, message):
    model, opt, acc, x = setup
    acc.nonfinite = "raise_early"
    snap = _snapshot(model, acc)
    with pytest.raises(gg.GradguardError, match=message):
        acc.backward(model(x).pow(2).mean() * factor, count=4)
    _assert_unchanged(model, acc, snap)


def test_second_backward_in_one_micro_batch_is_refused(setup):
    model, opt, acc, x = setup
    acc.backward(model(x).pow(2).mean(), count=4)
    snap = _snapshot(model, acc)
    with pytest.raises(gg.GradguardError, match="already called for micro-batch 1"):
        acc.backward(model(x).pow(2).mean(), count=4)
    _assert_unchanged(model, acc, snap)


def test_step_without_backward_is_refused(setup):
    model, opt, acc, x = setup
    snap = _snapshot(model, acc)
    with pytest.raises(gg.GradguardError, match="without backward"):
        acc.step()
    _assert_unchanged(model, acc, snap)


@pytest.mark.parametrize("steps", [0, -1, 2.5, True, "4"])
def test_bad_steps(steps):
    model = nn.Linear(2, 1)
    with pytest.raises(gg.GradguardError, match="steps must be an int >= 1"):
        gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.1), steps=steps)


@pytest.mark.parametrize("kwargs, message", [
    ({"max_grad_norm": 0}, "max_grad_norm"),
    ({"max_grad_norm": math.inf}, "max_grad_norm"),
    ({"nonfinite": "ignore"}, "nonfinite must be one of"),
])
def test_bad_options(kwargs, message):
    model = nn.Linear(2, 1)
    with pytest.raises(gg.GradguardError, match=message):
        gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.1), steps=2, **kwargs)


def test_plateau_scheduler_is_refused_with_advice():
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(gg.GradguardError, match="ReduceLROnPlateau.*scheduler.step\\(val_loss\\)"):
        gg.Accumulator(opt, steps=2, scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau(opt))


def test_not_an_optimizer():
    with pytest.raises(gg.GradguardError, match="must be a torch.optim.Optimizer, got Linear"):
        gg.Accumulator(nn.Linear(2, 1), steps=2)


def test_nonfinite_skip_drops_the_window_and_keeps_training():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    acc = gg.Accumulator(opt, steps=2, nonfinite="skip", scheduler=sched)
    x = torch.randn(4, 3, dtype=torch.float64)
    acc.backward(model(x).pow(2).mean() * math.nan, count=4)
    acc.step()
    acc.backward(model(x).pow(2).mean(), count=4)
    assert acc.step() is False
    assert acc.skipped_windows == 1 and acc.optimizer_steps == 0 and sched.last_epoch == 0
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p, q)
    assert all(p.grad is None for p in model.parameters())
    for _ in range(2):
        acc.backward(model(x).pow(2).mean(), count=4)
        stepped = acc.step()
    assert stepped and acc.optimizer_steps == 1 and math.isfinite(acc.loss)


def test_errors_are_runtime_errors():
    assert issubclass(gg.GradguardError, RuntimeError)
    assert issubclass(gg.GradientBugError, gg.GradguardError)
    assert issubclass(gg.GradientBugWarning, UserWarning)
