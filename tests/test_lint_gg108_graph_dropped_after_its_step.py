"""GG108: ``create_graph=True`` taken on a branch for a step that reads the graph, cleared to None right after.

``if needs_graph(opt): loss.backward(create_graph=True); opt.step(); opt.zero_grad(set_to_none=True)``: the
program takes the graph only for an optimizer that differentiates the stored gradients itself, and the
clearing right after its step drops the graph-carrying gradients: nothing outlives the step. Run in float64:
after the update no ``.grad`` holds a graph (the truth) and the linter is silent. Negative controls, still
reported: the same branch without the clearing (the graph stays in ``.grad`` after the step), and a
clearing that keeps the gradient tensors (``zero_grad(set_to_none=False)``), which the rule does not read as
dropping them.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

# torch warns of the reference cycle create_graph=True makes: the very thing these programs measure
pytestmark = pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")

GOOD = """\
import torch


def update(model, opt, x, y, needs_graph):
    loss = ((model(x) - y) ** 2).mean()
    if needs_graph(opt):
        loss.backward(create_graph=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
"""
KEPT = GOOD.replace("        opt.step()\n        opt.zero_grad(set_to_none=True)\n        return\n", "        opt.step()\n        return\n")
ZEROS = GOOD.replace("        opt.zero_grad(set_to_none=True)\n        return\n", "        opt.zero_grad(set_to_none=False)\n        return\n")


def _gg108(source):
    return [c for c in codes(source) if c == "GG108"]


def _graph_left(source) -> bool:
    namespace = {}
    exec(compile(textwrap.dedent(source), "<update>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)
    namespace["update"](model, opt, x, y, lambda o: True)
    return any(p.grad is not None and p.grad.requires_grad for p in model.parameters())


def test_a_graph_dropped_right_after_its_step_is_not_reported():
    assert not _graph_left(GOOD)
    assert _gg108(GOOD) == []


def test_negative_controls_a_graph_left_in_grad_is_reported():
    assert _graph_left(KEPT)
    assert "GG108" in _gg108(KEPT)
    assert "GG108" in _gg108(ZEROS)


def test_renamed_keeps_the_verdict():
    for source, found in ((GOOD, []), (KEPT, ["GG108"])):
        renamed = source.replace("opt", "hess_optim").replace("loss", "objective")
        assert renamed != source and _gg108(renamed) == found
