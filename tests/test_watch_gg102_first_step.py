"""GG102 at the first step the bug changes: ``zero_grad`` between backward and step from the start.

The reference is plain PyTorch: with the clear in the right place the first step
moves the parameters, with it between backward and step the first step moves
nothing (the negative control that the bug has an effect at step 1). The watch
reports the bug at step 1; skips on purpose (a non-finite gradient at step 1, a
spike later with an unconditional step, a warm-up pass cleared before training)
stay silent.
"""

import torch
import torch.nn.functional as F

import gradguard as gg


def _run(order, steps=4, nan_at=None, skip_at=None, warmup=False):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    theta0 = torch.cat([p.detach().flatten() for p in model.parameters()])
    moved = []
    with gg.watch(mode="record") as w:
        if warmup:
            F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 2)).backward()
            opt.zero_grad()
        for i in range(steps):
            x, y = torch.randn(8, 4), torch.randn(8, 2)
            if i == nan_at:
                x = x * float("nan")
            if order == "fixed":
                opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            if order == "bug" or i == skip_at or (i == nan_at and not all(torch.isfinite(p.grad).all() for p in model.parameters())):
                opt.zero_grad()
            opt.step()
            moved.append(float((torch.cat([p.detach().flatten() for p in model.parameters()]) - theta0).norm()))
    return [(f.code, f.step) for f in w.findings], moved


def test_zero_grad_between_backward_and_step_is_reported_at_step_1():
    found, moved = _run("bug")
    assert found == [("GG102", 1)]
    assert moved[0] == 0.0  # the first update applied nothing
    found, moved = _run("fixed")
    assert found == [] and moved[0] > 0.0


def test_deliberate_skips_stay_silent():
    assert _run("fixed", nan_at=0)[0] == []  # a non-finite gradient thrown away at step 1
    assert _run("fixed", skip_at=2)[0] == []  # a spike skipped mid-run, with an unconditional step
    assert _run("fixed", warmup=True)[0] == []  # a warm-up pass cleared before training


def test_raise_mode_stops_the_first_step():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    try:
        with gg.watch(mode="raise"):
            F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 2)).backward()
            opt.zero_grad()
            opt.step()
    except gg.GradientBugError as e:
        assert e.args and "GG102" in str(e)
    else:
        raise AssertionError("not raised")
    assert opt.state == {} or all(not s for s in opt.state.values())  # the step did not run


def test_a_negated_loss_divided_by_the_window_is_a_window_by_intent():
    """A policy-gradient loss ``-(logp * adv).mean() / n``, cleared on every micro-batch: GG102 at step 1
    (its factor is -1/n; before, only 1/n was read as the window's divisor and the finding came at step 3)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    n = 3
    with gg.watch(mode="record") as w:
        for step in range(4):
            for micro in range(n):
                opt.zero_grad()
                logp = torch.log_softmax(model(torch.randn(5, 4)), -1)[:, 0]
                (-(logp * torch.randn(5)).mean() / n).backward()
            opt.step()
    assert [(f.code, f.step) for f in w.findings] == [("GG102", 1)]
