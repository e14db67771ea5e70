"""GG102 discarded-gradient: move the clearing to just after the step that ends the window.

The clearing statement (with its comment) moves below the first step of the same optimizer
that follows it in the loop (or function) around it; where that step is already followed by a
clearing of the same optimizer, the misplaced one is only deleted.
"""

from __future__ import annotations

from typing import Optional

from ...findings import Finding, Fix
from ._tree import SCOPES, Tree, clear_target, is_clear, same, step_optimizer


def fix(t: Tree, finding: Finding) -> Optional[Fix]:
    clear = t.statement_at(finding.line, is_clear)
    if clear is None or not t.starts_line(clear) or not t.ends_line(clear):
        return None
    target = clear_target(clear)
    for scope in (a for a in t.ancestors(clear) if isinstance(a, SCOPES)):
        steps = t.within(scope, lambda s: step_optimizer(s) is not None and s.lineno > clear.end_lineno)
        if target is not None and not _model_clear(t, target):
            steps = [s for s in steps if same(step_optimizer(s), target)] or steps
        if not steps:
            continue
        step = steps[0]
        follower = _next(t, step)
        text = t.statement_text(clear, t.indent(step))
        if follower is not None and is_clear(follower) and same(clear_target(follower), target):
            return Fix("Delete the clearing that discards the gradients (the step already clears after itself)", (t.delete(clear),))
        return Fix(
            f"Move `{t.segment(clear)}` to just after `{t.segment(step)}`",
            (t.delete(clear), t.insert_after(step, text.lstrip(" \t"))),
        )
    return None


def _model_clear(t: Tree, target) -> bool:
    """``model.zero_grad()`` clears a module, not an optimizer: any step ends its window."""
    return "opt" not in t.segment(target).lower()


def _next(t: Tree, stmt):
    block = t.block.get(stmt, [])
    i = next(i for i, s in enumerate(block) if s is stmt)
    return block[i + 1] if i + 1 < len(block) else None
