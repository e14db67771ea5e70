"""GG108 for updates written by hand: a .grad holding an autograd graph read with no optimizer step.

The fixture pair runs as a user would; the in-process checks show the finding is
true (the buffer the update read requires grad) and that the negative controls
(the graph cleared before a clean backward, autograd.grad) are silent.
"""

import pytest
import torch

import gradguard as gg

from _scripts import SCRIPTS, alone, run_script

pytestmark = pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")


def test_update_by_hand_from_a_graph_in_grad_is_reported_at_the_first_update(tmp_path):
    findings = run_script(tmp_path, "gg108_by_hand_bad", *alone("GG108"))[1]
    assert [(f["code"], f["step"]) for f in findings] == [("GG108", 1)], findings
    lines = (SCRIPTS / "gg108_by_hand_bad.py").read_text().splitlines()
    assert findings[0]["line"] == next(i for i, t in enumerate(lines, 1) if "create_graph=True)  # BUG" in t)


def test_autograd_grad_and_a_cleared_graph_are_silent(tmp_path):
    assert run_script(tmp_path, "gg108_by_hand_good", *alone("GG108"))[1] == []


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def test_a_single_update_is_reported_at_the_end_and_the_finding_is_true():
    model = _model()
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with gg.watch(mode="record") as w:
        ((model(x) - y) ** 2).mean().backward(create_graph=True)
        read = [p.grad for p in model.parameters()]
        with torch.no_grad():
            for p, g in zip(model.parameters(), read):
                p -= 0.1 * g
    assert [f.code for f in w.findings] == ["GG108"]
    assert all(g.requires_grad and g.grad_fn is not None for g in read[:3])  # what the update read


def test_graph_in_grad_without_an_update_is_silent():
    # The gradient is only inspected (a gradient norm), then dropped: nothing is updated from it.
    model = _model()
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with gg.watch(mode="record") as w:
        for _ in range(2):
            ((model(x) - y) ** 2).mean().backward(create_graph=True)
            norm = sum(p.grad.pow(2).sum() for p in model.parameters())
            norm.backward()
            for p in model.parameters():
                p.grad = None
    assert w.findings == []


def test_an_optimizer_step_is_judged_once_at_the_step():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with gg.watch(mode="record") as w:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            ((model(x) - y) ** 2).mean().backward(create_graph=True)
            opt.step()
    assert [(f.code, f.step) for f in w.findings] == [("GG108", 1)]
    assert w.findings[0].line is not None
