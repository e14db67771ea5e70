"""GG104 unscaled-accumulation: divide the loss by the window's number of micro-batches.

The divisor is the accumulation variable the loop already has (``range(K)`` of the micro-step
loop, or ``K`` of the ``% K`` test that guards the step). ``loss = loss / K`` goes right before
the backward when the loss is a variable; an expression is divided in place. Without such a
variable there is no certain fix (use ``gradguard.Accumulator``).
"""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Finding, Fix
from ._tree import Tree, accumulation_count, backward_call, backward_loss, parenthesize, window_step


def fix(t: Tree, finding: Finding) -> Optional[Fix]:
    back = t.statement_at(finding.line, lambda s: backward_call(s) is not None)
    if back is None:
        return None
    loss = backward_loss(backward_call(back))
    count = accumulation_count(t, back, window_step(t, back))
    if loss is None or count is None:
        return None
    k = parenthesize(t, count)
    if isinstance(loss, ast.Name) and t.starts_line(back):
        return Fix(f"Divide the loss by `{t.segment(count)}` before backward", (t.insert_before(back, f"{loss.id} = {loss.id} / {k}"),))
    (line, col), (end_line, end_col) = t.start(loss), t.end(loss)
    from ...findings import Edit

    return Fix(f"Divide the loss by `{t.segment(count)}`", (Edit(line, col, end_line, end_col, f"{parenthesize(t, loss)} / {k}"),))
