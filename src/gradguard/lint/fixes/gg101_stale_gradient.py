"""GG101 stale-gradient: clear the optimizer's gradients once per update.

The model says which step reuses stale gradients, which backward pass starts its update
and whether the loop accumulates. Where it accumulates (a window test, micro-steps,
``accelerator.accumulate``), ``OPT.zero_grad(set_to_none=True)`` goes right after the step
that ends the window. Otherwise it goes before the update's first backward pass (after the
previous optimizer's step, so a GAN's generator loss does not leave gradients in the
discriminator's next step). An LBFGS-style closure passed to ``step`` gets the clearing as
its first statement, since the optimizer calls it several times per step.
"""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Fix
from .._model import Diagnostic
from ._tree import FUNCS, Tree


def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    call = d.step
    stmt = t.statement_of(call)
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute) or not t.alone(stmt):
        return None
    # the optimizer as written at the step (`scaler.step(opt)` steps `opt`)
    opt = call.args[0] if "scaler" in t.segment(call.func.value).lower() and call.args else call.func.value
    clear = f"{t.segment(opt)}.zero_grad(set_to_none=True)"
    message = f"Clear the gradients with `{clear}`"
    closure = _closure(d, call) if opt is call.func.value and call.args else None
    if closure is not None:
        return Fix(f"{message} at the top of the closure `{closure.name}`", (t.insert_before(closure.body[0], clear),))
    backward = t.statement_of(d.backward)
    if any(backward.lineno < r.node.lineno < stmt.lineno for r in d.loop.reads):
        return None  # .grad is read between backward and step (SAM, a buffer): where to clear depends on it
    if d.loop.accumulates() or not t.alone(backward) or t.function_of(backward) is not t.function_of(stmt):
        return Fix(f"{message} after the step", (t.insert_after(stmt, clear),))
    return Fix(f"{message} before the update's first backward pass", (t.insert_before(backward, clear),))


def _closure(d: Diagnostic, call: ast.Call) -> Optional[ast.AST]:
    """The local function passed to ``step`` (LBFGS's closure), as the model resolved it."""
    arg = call.args[0]
    if not isinstance(arg, ast.Name):
        return None
    fn = d.loop.functions.get(arg.id)
    return fn if isinstance(fn, ast.FunctionDef) and not isinstance(fn.body[0], FUNCS) else None
