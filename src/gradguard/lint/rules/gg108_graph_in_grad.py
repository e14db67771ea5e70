"""GG108 graph-in-grad: ``backward(create_graph=True)`` in a scope that computes no
higher-order gradient."""

from __future__ import annotations

import re

from .._ast import text
from .._model import Module, Report

CODE = "GG108"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg108_graph_in_grad_bad.py", "gg108_graph_in_grad_good.py")

# Where a scope computes higher-order gradients on purpose (GG108 stays silent).
_HIGHER_ORDER = re.compile(r"autograd\.grad\b|autograd\.functional|torch\.func\b|functorch|\bgrad\(|\bhvp\b|\bvhp\b|hessian")


def check_module(module: Module, report: Report) -> None:
    for call, scope in module.create_graphs:
        if not _HIGHER_ORDER.search(module.scope_text(scope)):
            report(
                CODE,
                call,
                f"`{text(call.func)}(create_graph=True)` stores gradients that carry an autograd graph in .grad, "
                f"and nothing in this scope computes a higher-order gradient with torch.autograd.grad.",
                backward=call,
            )
