"""GG105 unequal-weighting (unsafe): divide by the window's size, not by the running micro-step.

``loss / (micro_step + 1)`` weights the micro-batches 1, 1/2, 1/3, ...; the fix divides by the
accumulation variable instead. It changes the numbers the user sees (the loss and every step),
so it is applied only with ``--unsafe-fixes``.
"""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Edit, Finding, Fix
from ._tree import LOOPS, Tree, accumulation_count, backward_call, parenthesize, window_step


def fix(t: Tree, finding: Finding) -> Optional[Fix]:
    stmt = t.statement_at(finding.line)
    if stmt is None:
        return None
    loop = t.loop_of(stmt) or t.scope_of(stmt)
    if loop is None:
        return None
    counters = _counters(t, loop)
    division = next((d for d in _divisions(stmt) if _names(_divisor(d)) & counters), None)
    if division is None:
        return None
    backs = [s for s in t.within(loop, lambda s: backward_call(s) is not None) if s.lineno >= stmt.lineno]
    if not backs:
        return None
    count = accumulation_count(t, backs[0], window_step(t, backs[0]))
    if count is None or _names(count) & counters:
        return None
    divisor = _divisor(division)
    (line, col), (end_line, end_col) = t.start(divisor), t.end(divisor)
    return Fix(
        f"Divide by the window's size `{t.segment(count)}` instead of the running micro-step",
        (Edit(line, col, end_line, end_col, parenthesize(t, count)),),
        "unsafe",
    )


def _divisions(stmt: ast.stmt):
    for n in ast.walk(stmt):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            yield n
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Div):
            yield n


def _divisor(d: ast.AST) -> ast.AST:
    return d.value if isinstance(d, ast.AugAssign) else d.right


def _names(node: ast.AST) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _counters(t: Tree, loop: ast.AST) -> set:
    """Loop targets of the loops around (and in) the division: the running micro-step numbers."""
    found = set()
    for a in [loop, *t.ancestors(loop)]:
        if isinstance(a, LOOPS) and hasattr(a, "target"):
            found |= _names(a.target)
    for n in ast.walk(loop):
        if isinstance(n, (ast.For, ast.AsyncFor)):
            found |= _names(n.target)
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and isinstance(n.target, ast.Name):
            found.add(n.target.id)  # step += 1
    return found
