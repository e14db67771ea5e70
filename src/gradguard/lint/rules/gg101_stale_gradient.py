"""GG101 stale-gradient: a path through the iteration back-propagates and steps an
optimizer, but clears nothing that optimizer reads (per optimizer: clearing one of
two optimizers leaves the other's ``.grad`` growing)."""

from __future__ import annotations

import ast

from .._events import BACKWARD, CLEAR, MAYBE_CLEAR, STEP
from .._flow import condition_key
from .._model import Loop, Report, describe, in_nested_loop, reaches, tests

CODE = "GG101"


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
