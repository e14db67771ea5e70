"""GG101 stale-gradient: a path through the iteration back-propagates and steps an
optimizer, but clears nothing that optimizer reads (per optimizer: clearing one of
two optimizers leaves the other's ``.grad`` growing)."""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Fix
from .._edits import FUNCS, Tree
from .._events import BACKWARD, CLEAR, MAYBE_CLEAR, STEP, Event
from .._flow import Path, condition_key
from .._model import Diagnostic, Loop, Report, describe, tests

CODE = "GG101"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg101_stale_gradient_bad.py", "gg101_stale_gradient_good.py")


def check_loop(loop: Loop, report: Report) -> None:
    if not loop.trains:
        return
    clears = [e for p in loop.paths for e in p.events if e.kind in (CLEAR, MAYBE_CLEAR)]
    # `for p in params: if p.grad is not None: p.grad = None` forks inside the nested loop;
    # such a clearing counts on every path that reaches its loop
    nested = [e for e in clears if in_nested_loop(e)]
    for p in loop.step_paths:
        if BACKWARD not in p.kinds():
            continue
        on_path = [e for e in p.events if e.kind in (CLEAR, MAYBE_CLEAR)] + [e for e in nested if reaches(e, p)]
        for step in (e for e in p.events if e.kind == STEP):
            if any(loop.may_clear_for(c, step) for c in on_path):
                continue
            relevant = [c for c in clears if loop.may_clear_for(c, step)]
            if relevant and any(loop.boundary(t) for _, _, t in p.decisions):
                # clearing and stepping on different window tests (`i % k == 0` vs
                # `(i + 1) % k == 0`): we cannot tell whether they line up, so say nothing;
                # but a step that runs whenever the backward does (`if i % 4 == 0: zero_grad()`,
                # then backward() and step() every iteration) steps stale gradients
                clear_keys = {condition_key(t)[0] for c in relevant for t, _ in tests(c) if isinstance(t, ast.expr)}
                if any(loop.boundary(t) and k not in clear_keys for k, _, t in p.decisions):
                    continue  # the path also passed a window test that does not guard a clearing
                if not _steps_with_backward(loop, step, p):
                    continue
            # the update's first backward pass: the first after the path's previous step
            at = p.events.index(step)
            previous = max((i for i, e in enumerate(p.events[:at]) if e.kind == STEP), default=-1)
            backward = next((e for e in p.events[previous + 1 : at] if e.kind == BACKWARD), None) or next(
                e for e in p.events if e.kind == BACKWARD
            )
            where = "on some path through this loop" if p.decisions else "in this loop"
            others = " (the zero_grad() calls here clear another optimizer)" if on_path else " (no zero_grad())"
            report(
                CODE,
                step.node,
                f"{describe(step, 'step')} reuses gradients an earlier step already applied: {where} backward() "
                f"and step() run but nothing clears .grad{others}.",
                loop=loop,
                optimizer=step.target,
                step=step.node,
                backward=backward.node,
            )


def _steps_with_backward(loop, step, path) -> bool:
    """``step`` runs under no window test and under no condition that a backward on
    ``path`` does not share: it runs on every iteration that back-propagates."""
    guards = tests(step)
    if any(isinstance(t, ast.expr) and loop.boundary(t) for t, _ in guards):
        return False
    return any(
        b.kind == BACKWARD and all(t in tests(b) for t in guards)
        for b in path.events[: path.events.index(step)]
    )


def in_nested_loop(event: Event) -> bool:
    return any(s[0] == "loop" for s in event.stack)


def reaches(event: Event, path: Path) -> bool:
    """Whether ``path`` takes the branches that lead to ``event``'s nested loop."""
    for entry in event.stack:
        if entry[0] == "loop":
            return True
        test, taken = entry
        if not isinstance(test, ast.expr):
            continue  # a match case: assume it is reached
        key, negated = condition_key(test)
        value = path.decided(key)
        if value is None or (value != negated) != taken:
            return False
    return True


# --- the fix ---------------------------------------------------------------------
def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    """GG101 stale-gradient: clear the optimizer's gradients once per update.

    The model says which step reuses stale gradients, which backward pass starts its update
    and whether the loop accumulates. Where it accumulates (a window test, micro-steps,
    ``accelerator.accumulate``), ``OPT.zero_grad(set_to_none=True)`` goes right after the step
    that ends the window. Otherwise it goes before the update's first backward pass (after the
    previous optimizer's step, so a GAN's generator loss does not leave gradients in the
    discriminator's next step). An LBFGS-style closure passed to ``step`` gets the clearing as
    its first statement, since the optimizer calls it several times per step.
    """
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
