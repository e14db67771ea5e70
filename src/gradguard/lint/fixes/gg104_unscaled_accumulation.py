"""GG104 unscaled-accumulation: divide the loss by the window's number of micro-batches.

The divisor is the accumulation variable the model found for the loop (``K`` of the
``% K`` test that closes the window, ``range(K)`` of the micro-step loop). ``loss = loss / K``
goes right before the backward when the loss is a variable; an expression is divided in
place. Without such a variable, or when it is not visible where the backward runs (a test
in the loop, the backward in a helper), there is no certain fix (use ``gradguard.Accumulator``).
"""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Edit, Fix
from .._model import Diagnostic, backward_tensor
from ._tree import Tree, parenthesize


def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    count, back = d.accum, t.statement_of(d.backward)
    loss = backward_tensor(d.backward)
    if isinstance(loss, ast.Call) and isinstance(loss.func, ast.Attribute) and loss.func.attr == "scale" and loss.args:
        loss = loss.args[0]  # scaler.scale(loss).backward(): divide the loss, not the scaled one
    if count is None or loss is None or back is None or not _visible(t, count, back):
        return None
    k = parenthesize(t, count)
    if isinstance(loss, ast.Name) and t.alone(back):
        return Fix(f"Divide the loss by `{t.segment(count)}` before backward", (t.insert_before(back, f"{loss.id} = {loss.id} / {k}"),))
    (line, col), (end_line, end_col) = t.start(loss), t.end(loss)
    return Fix(f"Divide the loss by `{t.segment(count)}`", (Edit(line, col, end_line, end_col, f"({parenthesize(t, loss)} / {k})"),))


def _visible(t: Tree, count: ast.AST, at: ast.AST) -> bool:
    """The names of ``count`` mean the same at ``at``: a constant, or written in the function of
    ``at`` or in one enclosing it (a closure reads its enclosing function's names)."""
    if not any(isinstance(n, ast.Name) for n in ast.walk(count)):
        return True
    home = t.function_of(count)
    return home is t.function_of(at) or (home is not None and t.contains(home, at))
