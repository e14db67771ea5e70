"""GG102 on a clearing after the micro-batch loop, just before the step that applies the last,
partial window: it wipes the passes waiting for that step.

Every program here also runs in float64: the flagged one trains differently from the reference
(the same program with that clearing after the remainder's step), the silent twins train to it,
so a finding is tied to a real wrong gradient and a silence to a correct one.
"""

from __future__ import annotations

import dataclasses
import textwrap

import pytest
import torch

import gradguard as gg
from gradguard.lint.autofix import fix_source

from _benchmarks import load

load("oracle_fix_bench")  # puts benchmarks/ on the path
from oracle import generate  # noqa: E402


def _gg102_lines(src: str) -> set:
    return {f.line for f in gg.lint_source(src, "p.py") if f.code == "GG102"}


def _train(src: str) -> torch.Tensor:
    """Run the program (it trains on its own float64 data) and return its final parameters."""
    torch.manual_seed(0)
    ns = {"__name__": "__main__"}
    exec(compile(src, "p.py", "exec"), ns)
    return torch.cat([p.detach().flatten() for p in ns["net"].parameters()])


# renamed, with helpers and an unrelated statement: what it computes is the generator's shape
BAD = """
    import torch

    def wipe(o):
        o.zero_grad()

    def finish(o):
        o.step()

    g = torch.Generator().manual_seed(3)
    pieces = [(torch.randn(2, 6, generator=g, dtype=torch.float64), torch.randn(2, 3, generator=g, dtype=torch.float64)) for _ in range(8)]
    net = torch.nn.Linear(6, 3).double()
    with torch.no_grad():
        net.weight.copy_(torch.randn(3, 6, generator=g, dtype=torch.float64))
        net.bias.zero_()
    sgd = torch.optim.SGD(net.parameters(), lr=0.05)
    every = 3
    for n, (a, b) in enumerate(pieces):
        out = ((net(a) - b) ** 2).sum(dim=1).mean() / (every if n < len(pieces) - len(pieces) % every else len(pieces) % every)
        out.backward()
        if (n + 1) % every == 0:
            finish(sgd)
            wipe(sgd)
    unrelated = len(pieces)
    if len(pieces) % every:
{tail}
"""
STRAY = "        {clear}\n        {step}\n"
RIGHT = "        {step}\n        {clear}\n"


def _program(order: str, helpers: bool) -> str:
    clear, step = ("wipe(sgd)", "finish(sgd)") if helpers else ("sgd.zero_grad()", "sgd.step()")
    return textwrap.dedent(BAD.replace("{tail}", order.format(clear=clear, step=step).rstrip("\n")))


def _reference() -> torch.Tensor:
    """Plain float64 PyTorch: each window's mean gradient applied by SGD, the remainder's too."""
    g = torch.Generator().manual_seed(3)
    pieces = [(torch.randn(2, 6, generator=g, dtype=torch.float64), torch.randn(2, 3, generator=g, dtype=torch.float64)) for _ in range(8)]
    w = torch.randn(3, 6, generator=g, dtype=torch.float64).requires_grad_()
    bias = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    for start in range(0, len(pieces), 3):
        window = pieces[start:start + 3]
        loss = sum(((a @ w.T + bias - b) ** 2).sum(dim=1).mean() for a, b in window) / len(window)
        gw, gb = torch.autograd.grad(loss, (w, bias))
        with torch.no_grad():
            w -= 0.05 * gw
            bias -= 0.05 * gb
    return torch.cat([w.detach().flatten(), bias.detach()])


@pytest.mark.parametrize("helpers", [False, True])
def test_a_clearing_before_the_remainder_step_is_reported_and_trains_wrong(helpers):
    bad, right = _program(STRAY, helpers), _program(RIGHT, helpers)
    stray_line = bad.splitlines().index("    " + ("wipe(sgd)" if helpers else "sgd.zero_grad()")) + 1
    assert _gg102_lines(bad) == {stray_line}
    assert _gg102_lines(right) == set()  # negative control: cleared after the remainder's step
    reference = _reference()
    assert torch.allclose(_train(right), reference, atol=1e-12, rtol=0)
    assert not torch.allclose(_train(bad), reference, atol=1e-6, rtol=0)  # the finding is a real defect


def test_the_fix_moves_the_clearing_after_the_remainder_step_and_trains_to_the_reference():
    bad = _program(STRAY, helpers=False)
    [f] = [f for f in gg.lint_source(bad, "p.py") if f.code == "GG102"]
    assert f.fix is not None and f.fix.applicability == "safe"
    fixed = fix_source(bad, "p.py").text
    assert _gg102_lines(fixed) == set()
    assert torch.allclose(_train(fixed), _reference(), atol=1e-12, rtol=0)
    # through helpers the fix would move calls whose bodies it does not prove: none is offered
    [h] = [f for f in gg.lint_source(_program(STRAY, helpers=True), "p.py") if f.code == "GG102"]
    assert h.fix is None


def test_no_remainder_step_and_a_clearing_at_the_next_epoch_stays_silent():
    # the loop ends with its partial window pending; the next epoch clears it before any step: the
    # remainder is dropped, a choice (as `drop_last`), and no step after the loop is fed a wiped buffer
    src = textwrap.dedent("""
        import torch
        net = torch.nn.Linear(6, 3).double()
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        data = [(torch.randn(2, 6, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)) for _ in range(8)]
        for epoch in range(2):
            opt.zero_grad()
            for i, (x, y) in enumerate(data):
                (((net(x) - y) ** 2).sum(dim=1).mean() / 3).backward()
                if (i + 1) % 3 == 0:
                    opt.step()
                    opt.zero_grad()
            print(epoch)
    """)
    assert _gg102_lines(src) == set()


FORMS = generate.FORMS


@pytest.mark.parametrize("form", FORMS)
def test_generated_forms(form):
    spec = generate.Spec(seed=5, k=3, sizes=(2,) * 8, condition="mod_plus1", clear_form="zero_grad",
                         clear_place="before_step", division="K", remainder="after_loop", logging="none")
    bad = generate.render(spec, form)
    lines = bad.splitlines()
    after_loop = max(i for i, line in enumerate(lines) if line.lstrip().startswith("if ") and "% " in line and "!= 0" in line) + 1
    found = _gg102_lines(bad)
    assert any(n > after_loop for n in found), (found, after_loop)  # the remainder's clearing, not only the loop's
    for place in ("after_step", "window_start"):  # negative controls: correct clearings, same remainder step
        assert _gg102_lines(generate.render(dataclasses.replace(spec, clear_place=place), form)) == set()
