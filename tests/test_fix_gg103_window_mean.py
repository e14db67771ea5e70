"""GG103's fix steps the last, partial window at its mean, or is not offered.

The fix multiplies the partial window's gradients by K / K' and repeats the block a whole window
closes with. That gives the partial window its mean only where a whole window's step applies its
own mean: every loss divided by K once and nothing rescaling ``.grad``. A loop that also divides
the gradients (``p.grad /= K`` on top of ``loss / K``) or divides its loss twice makes every window
weigh 1/K of its mean, and the repeated block weighed the partial one the same: the fixed program
stepped a gradient that is not the partial window's mean (after the loop, and after the epoch loop
where the window count runs on through the epochs). Judged here in float64 against plain
PyTorch: the gradient each step of the fixed program applies, against the full-batch mean gradient
of that step's items at the same parameters.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

import gradguard as gg
from gradguard.lint.autofix import fix_source

SIZES = (2,) * 7  # 7 micro-batches of 2 items, K = 3: two whole windows and a partial one of 1 micro-batch
K = 3

PROGRAM = """
import torch
torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
X = torch.randn(14, 6, generator=g, dtype=torch.float64)
Y = torch.randn(14, 3, generator=g, dtype=torch.float64)
batches = [(X[a:a + 2], Y[a:a + 2]) for a in range(0, 14, 2)]
model = torch.nn.Linear(6, 3).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
accumulation_steps = 3
for step_index, (inputs, targets) in enumerate(batches):
    loss = ((model(inputs) - targets) ** 2).sum(dim=1).mean(){loss_scale}
    loss.backward()
    if (step_index + 1) % accumulation_steps == 0:
{grad_scale}        optimizer.step()
        optimizer.zero_grad()
"""

GRAD_DIV = """        for param in model.parameters():
            if param.grad is not None:
                param.grad /= accumulation_steps
"""
GRAD_DIV_ = """        for param in model.parameters():
            param.grad.div_(accumulation_steps)
"""

# the programs whose windows weigh 1/K of their mean (a wrong class of the fix) ...
SCALED_TWICE = {
    "loss_and_grad": dict(loss_scale=" / accumulation_steps", grad_scale=GRAD_DIV),
    "loss_and_grad_div_": dict(loss_scale=" / accumulation_steps", grad_scale=GRAD_DIV_),
    "loss_twice": dict(loss_scale=" / accumulation_steps / accumulation_steps", grad_scale=""),
}
# ... and the one whose windows apply their mean (negative control: the fix is offered and right)
SCALED_ONCE = dict(loss_scale=" / accumulation_steps", grad_scale="")


def _steps(source: str):
    """Run ``source``: per step, the parameters before it and the gradient it applies (float64)."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    seen = []

    def hook(opt, args, kwargs):
        params = [p for g in opt.param_groups for p in g["params"]]
        seen.append(([p.detach().clone() for p in params], [p.grad.detach().clone() for p in params]))

    h = register_optimizer_step_pre_hook(hook)
    try:
        ns: dict = {}
        exec(compile(source, "<gg103>", "exec"), ns)
    finally:
        h.remove()
    return seen, ns


def _reference_grad(params, rows):
    """Plain PyTorch: the gradient of the mean per-item loss over ``rows`` (one full batch) at ``params``."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(14, 6, generator=g, dtype=torch.float64)
    y = torch.randn(14, 3, generator=g, dtype=torch.float64)
    model = torch.nn.Linear(6, 3).double()
    with torch.no_grad():
        for p, v in zip(model.parameters(), params):
            p.copy_(v)
    ((model(x[rows]) - y[rows]) ** 2).sum(dim=1).mean().backward()
    return [p.grad for p in model.parameters()]


def _window_rows(n: int):
    """The rows of the n-th window (K micro-batches of 2 rows; the last one partial)."""
    return list(range(n * K * 2, min((n + 1) * K * 2, 2 * len(SIZES))))


def _program(**parts) -> str:
    return textwrap.dedent(PROGRAM).format(**parts)


@pytest.mark.parametrize("mode", [False, True], ids=["safe", "unsafe"])
@pytest.mark.parametrize("name", sorted(SCALED_TWICE))
def test_no_fix_steps_a_partial_window_at_other_than_its_mean(name, mode):
    src = _program(**SCALED_TWICE[name])
    [finding] = [f for f in gg.lint_source(src, "p.py") if f.code == "GG103"]
    fixed = fix_source(src, "p.py", unsafe=mode).text
    steps, _ = _steps(fixed)
    # every step the fixed program takes beyond the whole windows applies its own window's mean
    for n, (params, grads) in enumerate(steps[len(SIZES) // K:], start=len(SIZES) // K):
        ref = _reference_grad(params, _window_rows(n))
        assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(grads, ref)), (name, n, fixed)
    # the model cannot prove the partial window's mean here: no fix, and the finding stays
    assert finding.fix is None, fixed
    assert "GG103" in {f.code for f in gg.lint_source(fixed, "p.py")}


def test_negative_control_windows_scaled_once_get_the_fix_and_train_to_the_full_batch_reference():
    src = _program(**SCALED_ONCE)
    [finding] = [f for f in gg.lint_source(src, "p.py") if f.code == "GG103"]
    assert finding.fix is not None and finding.fix.applicability == "safe"
    fixed = fix_source(src, "p.py").text
    steps, ns = _steps(fixed)
    assert len(steps) == 3  # two whole windows and the partial one
    for n, (params, grads) in enumerate(steps):
        ref = _reference_grad(params, _window_rows(n))
        assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(grads, ref)), n
    # and the whole float64 trajectory is plain PyTorch's, one full batch per window
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(14, 6, generator=g, dtype=torch.float64)
    y = torch.randn(14, 3, generator=g, dtype=torch.float64)
    for n in range(3):
        opt.zero_grad()
        rows = _window_rows(n)
        ((model(x[rows]) - y[rows]) ** 2).sum(dim=1).mean().backward()
        opt.step()
    got = torch.cat([p.detach().flatten() for p in ns["model"].parameters()])
    want = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert torch.allclose(got, want, atol=1e-12)


def test_negative_control_the_old_fix_on_a_twice_scaled_window_is_wrong():
    # what the fix wrote before (the partial window multiplied by K / K', then the repeated block divides by K):
    # its last step applies 1/K of the partial window's mean, so the check above does catch that fix
    src = _program(**SCALED_TWICE["loss_and_grad"])
    old = src + textwrap.dedent("""
        if (step_index + 1) % accumulation_steps != 0:
            [p.grad.mul_(accumulation_steps / ((step_index + 1) % accumulation_steps)) for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
            for param in model.parameters():
                if param.grad is not None:
                    param.grad /= accumulation_steps
            optimizer.step()
            optimizer.zero_grad()
    """)
    steps, _ = _steps(old)
    params, grads = steps[-1]
    ref = _reference_grad(params, _window_rows(2))
    assert all(torch.allclose(a, b / K, atol=1e-12) for a, b in zip(grads, ref))
    assert not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads, ref))


# the run's last window, where the window count runs on through the epochs (the fix steps once after the epoch loop)
TAIL = """
import torch
torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
X = torch.randn(14, 6, generator=g, dtype=torch.float64)
Y = torch.randn(14, 3, generator=g, dtype=torch.float64)
batches = [(X[a:a + 2], Y[a:a + 2]) for a in range(0, 14, 2)]
model = torch.nn.Linear(6, 3).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
accumulation_steps = 3
step = 0
for epoch in range(2):
    for inputs, targets in batches:
        loss = ((model(inputs) - targets) ** 2).sum(dim=1).mean(){loss_scale}
        loss.backward()
        step += 1
        if step % accumulation_steps == 0:
{grad_scale}            optimizer.step()
            optimizer.zero_grad()
"""


def _tail_rows(n: int):
    """The rows of the n-th window of the two epochs' 14 micro-batches (the last window holds 2)."""
    stream = [m % len(SIZES) for m in range(2 * len(SIZES))]
    return [r for m in stream[n * K:(n + 1) * K] for r in (2 * m, 2 * m + 1)]


@pytest.mark.parametrize("twice", [True, False], ids=["grad_divided_too", "negative_control_loss_only"])
def test_run_tail_fix_steps_the_last_window_at_its_mean_or_is_not_offered(twice):
    grad = "            for param in model.parameters():\n                param.grad /= accumulation_steps\n" if twice else ""
    src = textwrap.dedent(TAIL).format(loss_scale=" / accumulation_steps", grad_scale=grad)
    [finding] = [f for f in gg.lint_source(src, "p.py") if f.code == "GG103"]
    fixed = fix_source(src, "p.py").text
    steps, _ = _steps(fixed)
    whole = 2 * len(SIZES) // K
    for n, (params, grads) in enumerate(steps[whole:], start=whole):
        ref = _reference_grad(params, _tail_rows(n))
        assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(grads, ref)), (n, fixed)
    if twice:
        assert finding.fix is None and len(steps) == whole, fixed
    else:  # the fix is offered and every step, the run's last partial window's included, applies its window's mean
        assert finding.fix is not None and len(steps) == whole + 1, fixed
        for n, (params, grads) in enumerate(steps):
            ref = _reference_grad(params, _tail_rows(n))
            assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(grads, ref)), n
