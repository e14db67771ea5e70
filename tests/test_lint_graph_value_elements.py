"""The one value model of "this value holds no graph" (``gradguard.lint._graph_value``), as GG201 and GG202
both read it: the element of a tuple a function of the file returns, and the sizes and indices of a tensor.

Each program is run (float64, plain PyTorch) and the value it binds is checked for a graph by what it is
(a tensor with ``grad_fn``); the model must say graph-free exactly where the run finds none.
"""

from __future__ import annotations

import ast
import textwrap

import pytest
import torch

from gradguard.lint._graph_value import graph_free

ELEMENT = """\
import torch


def evaluate(net, x, y):
    out = net(x)
    loss = ((out - y) ** 2).mean()
    return {first}, out.argmax(-1)


def run(net, x, y):
    value, picked = evaluate(net, x, y)
    kept = value
    return kept
"""

SIZES = """\
import torch


def run(net, x, y):
    out = net(x)
    kept = {expr}
    return kept
"""


def _holds_graph(source: str) -> bool:
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2).double()
    value = scope["run"](net, torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64))
    return isinstance(value, torch.Tensor) and value.grad_fn is not None


def _model_free(source: str) -> bool:
    tree = ast.parse(source)
    run = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run")
    at = next(s for s in run.body if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "kept")
    return graph_free(tree, at.value, at)


@pytest.mark.parametrize("first,free", [("loss.item()", True), ("loss.detach()", True), ("float(loss)", True),
                                        ("loss", False), ("loss * 2.0", False)])
def test_an_unpacked_element_of_a_returned_tuple(first, free):
    source = textwrap.dedent(ELEMENT.format(first=first))
    assert _holds_graph(source) is (not free)  # the run
    assert _model_free(source) is free


@pytest.mark.parametrize("expr,free", [("out.size(0) * 2", True), ("out.argmax(-1)", True), ("out.numel()", True),
                                       ("out.sum() * out.size(0)", False), ("out.mean()", False)])
def test_sizes_and_indices_of_a_tensor(expr, free):
    source = textwrap.dedent(SIZES.format(expr=expr))
    assert _holds_graph(source) is (not free)
    assert _model_free(source) is free
