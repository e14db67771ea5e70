"""GG201 graph-kept-by-logging: add the loss as a number (``.item()``) or a detached tensor.

``.item()`` where the running total is a Python number; ``.detach()`` where it is a tensor
on purpose (started from a tensor, or used as one later: ``total.item()``, ``total.cpu()``),
so that it stays on the device and keeps its shape.
"""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Edit, Fix
from .._model import Diagnostic
from ._tree import Tree


def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    stmt = d.node
    if not isinstance(stmt, (ast.AugAssign, ast.Assign)):
        return None
    target = stmt.target if isinstance(stmt, ast.AugAssign) else (stmt.targets[0] if len(stmt.targets) == 1 else None)
    if target is None:
        return None
    total = t.segment(target)
    term = _term(stmt.value, total)
    if term is None:
        return None
    method = "detach" if _tensor_total(t, stmt, total) else "item"
    (line, col), (end_line, end_col) = t.start(term), t.end(term)
    text = t.segment(term)
    return Fix(f"Add `{text}.{method}()` instead of the tensor", (Edit(line, col, end_line, end_col, f"{text}.{method}()"),))


def _term(value: ast.AST, total: str) -> Optional[ast.AST]:
    """The tensor added: the value itself, or the first operand that is not the total nor a call."""
    if isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)):
        return value if ast.unparse(value) != total else None
    if isinstance(value, ast.BinOp):
        for side in (value.left, value.right):
            found = _term(side, total)
            if found is not None:
                return found
    return None


def _tensor_total(t: Tree, stmt: ast.stmt, total: str) -> bool:
    scope = t.function_of(stmt) or t.tree
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign) and any(ast.unparse(tg) == total for tg in n.targets) and n is not stmt:
            if "torch." in ast.unparse(n.value) or "zeros" in ast.unparse(n.value):
                return True
        if isinstance(n, ast.Attribute) and ast.unparse(n.value) == total and n.attr in ("item", "cpu", "detach", "to", "tolist", "numpy"):
            return True
    return False
