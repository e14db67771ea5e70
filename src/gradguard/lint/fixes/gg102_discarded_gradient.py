"""GG102 discarded-gradient: move the clearing to just after the step that ends the window.

The model names the clearing and the step of the same optimizer that ends its window. The
clearing statement (with its comment) moves below that step; where the step is already
followed by a clearing of the same object, the misplaced one is only deleted.
"""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Fix
from .._model import Diagnostic
from ._tree import Tree


def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    clear, step = t.statement_of(d.clear), t.statement_of(d.step)
    if not t.alone(clear) or not t.alone(step) or t.contains(clear, step):
        return None
    follower = t.next_statement(step)
    if follower is not None and _clears(follower, d.clear):
        return Fix("Delete the clearing that discards the gradients (the step already clears after itself)", (t.delete(clear),))
    text = t.statement_text(clear, t.indent(step))
    return Fix(
        f"Move `{t.segment(clear)}` to just after `{t.segment(step)}`",
        (t.delete(clear), t.insert_after(step, text.lstrip(" \t"))),
    )


def _clears(stmt: ast.stmt, call: ast.AST) -> bool:
    """``stmt`` is the same clearing call as ``call`` (same receiver)."""
    value = getattr(stmt, "value", None)
    return (
        isinstance(stmt, ast.Expr) and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
        and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
        and value.func.attr == call.func.attr and ast.dump(value.func.value) == ast.dump(call.func.value)
    )
