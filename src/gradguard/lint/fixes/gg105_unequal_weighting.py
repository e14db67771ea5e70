"""GG105 unequal-weighting (unsafe): divide by the window's size, not by the running micro-step.

``loss / (micro_step + 1)`` weights the micro-batches 1, 1/2, 1/3, ...; the fix replaces the
divisor the model found with the loop's accumulation variable. It changes the numbers the user
sees (the loss and every step), so it is applied only with ``--unsafe-fixes``.
"""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Edit, Fix
from .._model import Diagnostic
from ._tree import Tree, parenthesize


def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    divisor = d.accum
    if divisor is None:
        return None
    # `loss / (i % K + 1)`: the window's size is the K the counter is taken modulo; else the
    # loop's accumulation variable, where it means the same at the division
    count = next((n.right for n in ast.walk(divisor) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)), None)
    if count is None and d.loop is not None:
        count = d.loop.window_size()
        if count is not None and t.function_of(count) is not t.function_of(divisor):
            count = None
    if count is None or ast.dump(count) == ast.dump(divisor):
        return None
    (line, col), (end_line, end_col) = t.start(divisor), t.end(divisor)
    text = t.lines[line - 1]
    if end_line == line and text[col - 2 : col - 1] == "(" and text[end_col - 1 : end_col] == ")":
        col, end_col = col - 1, end_col + 1  # `/ (micro_step + 1)` -> `/ K`, parentheses and all
    return Fix(
        f"Divide by the window's size `{t.segment(count)}` instead of the running micro-step",
        (Edit(line, col, end_line, end_col, parenthesize(t, count)),),
        "unsafe",
    )
