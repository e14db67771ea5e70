"""GG108 graph-in-grad: ``backward(create_graph=True)`` in a scope that computes no
higher-order gradient itself."""

from __future__ import annotations

import ast
import re
from typing import Iterator, Optional

from .._ast import text
from .._model import Module, Report

CODE = "GG108"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg108_graph_in_grad_bad.py", "gg108_graph_in_grad_good.py")
#: No automatic fix (``gradguard lint --fix`` leaves its findings as they are).
FIX_SAFETY = None

# Where a scope computes higher-order gradients on purpose (GG108 stays silent): calls of these.
_HIGHER_ORDER = re.compile(r"autograd\.grad$|autograd\.functional|torch\.func\b|functorch|(?:^|\.)(?:grad|hvp|vhp|jvp|vjp|jacrev|jacfwd)$|hessian")


def check_module(module: Module, report: Report) -> None:
    for call, scope in module.create_graphs:
        if not _computes_higher_order(module, scope):
            report(
                CODE,
                call,
                f"`{text(call.func)}(create_graph=True)` stores gradients that carry an autograd graph in .grad, "
                f"and nothing in this scope computes a higher-order gradient with torch.autograd.grad.",
                backward=call,
            )


def _computes_higher_order(module: Module, scope: Optional[ast.AST]) -> bool:
    """A call of ``torch.autograd.grad`` (``torch.func``, ``hvp``, ...) written in ``scope`` itself:
    a comment naming one is no call, and for code at module level, a helper function of the file
    that differentiates the ``.grad`` the backward pass left there is the leak, not its excuse."""
    return any(_HIGHER_ORDER.search(text(call.func)) for call in _calls(scope if scope is not None else module.tree, scope is None))


def _calls(node: ast.AST, top_level: bool) -> Iterator[ast.Call]:
    for child in ast.iter_child_nodes(node):
        if top_level and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(child, ast.Call):
            yield child
        yield from _calls(child, top_level)
