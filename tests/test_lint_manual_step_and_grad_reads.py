"""A step written by hand (`w -= lr * w.grad`) and a number that only reads a gradient
(`total += float(p.grad.pow(2).sum())`) inside a window's closing block.

The linter used to take any `name += ... .grad ...` for a step by hand, and its GG111 message
named a step by its function: on the gradient-norm total it stopped with an AttributeError
traceback, and on a real step by hand as well. Each program below is run in float64: the truth
is whether its final weights equal plain SGD on each window's mean gradient.
"""

from __future__ import annotations

import textwrap

import torch

from gradguard.lint import lint_source

BY_HAND = textwrap.dedent(
    """
    import torch

    torch.manual_seed(0)
    w = torch.zeros(2, 1, dtype=torch.float64, requires_grad=True)
    data = [torch.randn(3, 2, dtype=torch.float64) for _ in range(5)]
    K = 2
    lr = 0.1
    for i, x in enumerate(data, 1):
        ((x @ w - 1).pow(2).mean() / DIVISOR).backward()
        if i % K == 0 or i == len(data):
            with torch.no_grad():
                w -= lr * w.grad
            w.grad = None
    """
)

OPTIMIZER = textwrap.dedent(
    """
    import torch

    torch.manual_seed(0)
    loader = [torch.randn(3, 2, dtype=torch.float64) for _ in range(5)]
    model = torch.nn.Linear(2, 1, bias=False).double()
    torch.nn.init.zeros_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    K = 2
    total = 0.0
    for i, x in enumerate(loader, 1):
        ((model(x) - 1).pow(2).mean() / DIVISOR).backward()
        if i % K == 0 or i == len(loader):
            optimizer.step()
            READ
            optimizer.zero_grad()
    w = model.weight.detach().t()
    """
)

WHOLE_K = "K"
OWN_SIZE = "min(K, len(DATA) - (i - 1) // K * K)"


def _program(template: str, divisor: str, read: str = "") -> str:
    data = "data" if "data = " in template else "loader"
    return template.replace("DIVISOR", divisor.replace("DATA", data)).replace("READ", read or "pass")


def _final_weights(source: str) -> torch.Tensor:
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    return scope["w"].detach()


def _reference() -> torch.Tensor:
    """Plain SGD on each window's mean gradient (windows of 2, 2 and 1 micro-batches of 3 rows)."""
    torch.manual_seed(0)
    w = torch.zeros(2, 1, dtype=torch.float64)
    data = [torch.randn(3, 2, dtype=torch.float64) for _ in range(5)]
    for start in range(0, len(data), 2):
        window = data[start:start + 2]
        grad = sum(2 * x.t() @ (x @ w - 1) / x.shape[0] for x in window) / len(window)
        w = w - 0.1 * grad
    return w


def _codes(source: str) -> list:
    return sorted({f.code for f in lint_source(source, "program.py")})


def test_the_programs_truth_in_float64():
    reference = _reference()
    for template in (BY_HAND, OPTIMIZER):
        right = _final_weights(_program(template, OWN_SIZE))
        wrong = _final_weights(_program(template, WHOLE_K))
        assert torch.allclose(right, reference, rtol=0, atol=1e-12)
        assert not torch.allclose(wrong, reference, rtol=0, atol=1e-6)  # the last window is halved


def test_a_step_by_hand_closing_a_short_window_is_reported_by_its_statement():
    findings = lint_source(_program(BY_HAND, WHOLE_K), "program.py")
    assert [f.code for f in findings] == ["GG111"]
    assert "`w -= lr * w.grad`" in findings[0].message
    assert _codes(_program(BY_HAND, OWN_SIZE)) == []


def test_reading_a_gradient_into_a_number_is_no_step_and_keeps_the_verdict():
    for read in ("", "total += float(model.weight.grad.pow(2).sum())", "total += 1.0",
                 "total += model.weight.grad.norm().item()"):
        bad = lint_source(_program(OPTIMIZER, WHOLE_K, read), "program.py")
        assert [f.code for f in bad] == ["GG111"], read
        assert "`optimizer.step()`" in bad[0].message
        assert _codes(_program(OPTIMIZER, OWN_SIZE, read)) == [], read
