"""GG101 stale-gradient: clear the optimizer's gradients once per update.

Where the loop accumulates (the step under an ``if``, micro-steps, ``accelerator.accumulate``),
``OPT.zero_grad(set_to_none=True)`` goes right after the step that ends the window. Otherwise it
goes before the first backward of the update (after the previous optimizer's step, so a GAN's
generator loss does not leave gradients in the discriminator's next step). An LBFGS-style
closure passed to ``step`` gets the clearing as its first statement, since the optimizer calls
it several times per step.
"""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Finding, Fix
from ._tree import FUNCS, Tree, backward_call, is_accumulating, step_optimizer


def fix(t: Tree, finding: Finding) -> Optional[Fix]:
    step = t.statement_at(finding.line, lambda s: step_optimizer(s) is not None)
    if step is None or not t.starts_line(step) or not t.ends_line(step):
        return None
    opt = step_optimizer(step)
    clear = f"{t.segment(opt)}.zero_grad(set_to_none=True)"
    message = f"Clear the gradients with `{clear}`"
    call = step.value
    closure = _closure(t, step, call.args[0]) if call.args and opt is call.func.value else None
    if closure is not None:
        first = closure.body[0]
        return Fix(f"{message} at the top of the closure `{closure.name}`", (t.insert_before(first, clear),))
    scope = t.scope_of(step)
    if scope is None:
        return None
    backwards = [s for s in t.within(scope, lambda s: backward_call(s) is not None) if s.lineno < step.lineno]
    # the backward passes of this update: those after the previous step in the same scope
    previous = [s for s in t.within(scope, lambda s: step_optimizer(s) is not None) if s.lineno < step.lineno]
    if previous:
        backwards = [b for b in backwards if b.lineno > previous[-1].end_lineno] or backwards
    if not backwards or is_accumulating(t, backwards[0], step):
        return Fix(f"{message} after the step", (t.insert_after(step, clear),))
    target = backwards[0]
    if not t.starts_line(target):
        return None
    return Fix(f"{message} before the update's first backward pass", (t.insert_before(target, clear),))


def _closure(t: Tree, step: ast.stmt, arg: ast.AST) -> Optional[ast.FunctionDef]:
    """The local function passed to ``step`` that back-propagates (LBFGS's closure)."""
    if not isinstance(arg, ast.Name):
        return None
    scope = t.scope_of(step)
    candidates = [
        n
        for n in ast.walk(scope if scope is not None else t.tree)
        if isinstance(n, ast.FunctionDef) and n.name == arg.id and n.lineno < step.lineno
    ]
    if not candidates:
        return None
    func = candidates[-1]
    if not any(backward_call(s) is not None for s in ast.walk(func) if isinstance(s, ast.stmt)):
        return None
    return func if not isinstance(func.body[0], FUNCS) else None
