"""GG111 underscaled-window: a step closes a window of K' < K micro-batches whose losses were
each divided by the full window size K, so its gradient is K'/K of their mean.

Two shapes, both with every backward pass of the loop back-propagating ``loss / K``:

* the window test lets the step run before K micro-batches (``if (i + 1) % K == 0 or
  i + 1 == len(loader):``, Fabric's ``is_accumulating = ... and i + 1 < len(loader)``): the
  loader's last, partial window is stepped with its losses divided by K;
* the loop steps on ``% K`` alone and a step after the loop applies the remainder without
  rescaling its gradients by K / K' (``if (i + 1) % K != 0: optimizer.step()``).

A divisor that is not K (the window's own size, ``min(K, n - start)``), a rescaling of
``.grad`` before the remainder's step (``p.grad.mul_(K / K')``), a check in the function
that the length divides (``assert len(loader) % K == 0``), or literals that prove it (8
micro-batches, K = 4, the window closing at the eighth) is correct and not reported.
"""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .._ast import assignments, terminal, text
from .._literals import counters_at_last, literal_int, literal_length, truth
from .._model import Loop, Report, backward_tensor, tests

CODE = "GG111"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg111_underscaled_window_bad.py", "gg111_underscaled_window_good.py")
#: No automatic fix (``gradguard lint --fix`` leaves its findings as they are).
FIX_SAFETY = None


def check_loop(loop: Loop, report: Report) -> None:
    if not loop.trains or loop.accumulate or not loop.steps:
        return
    for step in loop.steps:
        for test, taken in tests(step):
            if not isinstance(test, ast.expr):
                continue
            k = _bypassed_modulo(loop, loop.resolve(test), taken)
            if (
                k is not None and _every_loss_divided_by(loop, k) and not loop.proves_whole_windows(k)
                and not _whole_literal_windows(loop, loop.resolve(test), k)
            ):
                report(
                    CODE,
                    step.node,
                    f"`{text(step.node.func)}()` also closes a window shorter than `{text(k)}` micro-batches (the "
                    f"loader's last, partial one), whose losses were each divided by `{text(k)}`: with K' < K "
                    f"micro-batches the step's gradient is K'/K of their mean.",
                    loop=loop, optimizer=step.target, step=step.node,
                )
                break
    k = _modulo_window(loop)
    if k is None or not _every_loss_divided_by(loop, k) or loop.proves_whole_windows(k):
        return
    for call in _remainder_steps(loop):
        report(
            CODE,
            call,
            f"`{text(call.func)}()` after the loop steps the last, partial window, whose losses were each divided "
            f"by the full window size `{text(k)}` and whose gradients are not rescaled by K / K' before the step: "
            f"its gradient is K'/K of the mean.",
            loop=loop, step=call,
        )


def _whole_literal_windows(loop: Loop, test: ast.expr, k: ast.expr) -> bool:
    """The loop runs over a literal number of micro-batches N (``range(8)``, a bound list of 8),
    the window size K is a literal dividing N, and the test's ``% K`` comparison is true at the
    last micro-batch: the windows are aligned and whole, the ``or`` never closes a short one."""
    total, size = literal_length(loop.node.iter, loop), literal_int(k, loop)
    if not total or not size or size <= 0 or total % size:
        return False
    last = counters_at_last(loop, total, [])
    modulo = [
        n for n in ast.walk(test)
        if isinstance(n, ast.Compare) and any(isinstance(m, ast.BinOp) and isinstance(m.op, ast.Mod) for m in ast.walk(n))
    ]
    return bool(last) and bool(modulo) and all(truth(m, last, loop) is True for m in modulo)


def _is_modulo(node: ast.AST) -> Optional[ast.expr]:
    """``K`` of a test made of ``% K`` (``(i + 1) % K == 0``, ``step % K != 0``)."""
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
            return n.right
    return None


def _bypassed_modulo(loop: Loop, test: ast.expr, positive: bool) -> Optional[ast.expr]:
    """``K`` where the step's condition (``test`` if ``positive``, else its negation) is a modulo
    window test OR-ed with a condition that varies from one iteration to the next: the window can
    close before K micro-batches. (``not (a and b)`` is ``not a or not b``.)"""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _bypassed_modulo(loop, test.operand, not positive)
    if not isinstance(test, ast.BoolOp):
        return None
    if isinstance(test.op, ast.Or) == positive:
        ks = [_is_modulo(v) for v in test.values]
        k = next((k for k in ks if k is not None), None)
        if k is not None and any(
            kv is None and loop.varies(v) and not _same_boundary(v, k) for v, kv in zip(test.values, ks)
        ):
            return k
    for v in test.values:
        k = _bypassed_modulo(loop, v, positive)
        if k is not None:
            return k
    return None


def _same_boundary(test: ast.expr, k: ast.expr) -> bool:
    """``K == 1`` and the like: a condition about the window size itself, not a shorter window."""
    return any(ast.dump(n) == ast.dump(k) for n in ast.walk(test)) and not any(
        isinstance(n, ast.Call) and terminal(n.func) == "len" for n in ast.walk(test)
    )


def _modulo_window(loop: Loop) -> Optional[ast.expr]:
    """``K`` where every step of the loop runs under ``% K`` tests alone."""
    found = None
    for step in loop.steps:
        guards = [loop.resolve(t) for t, _ in tests(step) if isinstance(t, ast.expr)]
        ks = [_is_modulo(g) for g in guards]
        if not ks or any(k is None for k in ks) or any(isinstance(g, ast.BoolOp) for g in guards):
            return None
        found = found or ks[0]
    return found


def _every_loss_divided_by(loop: Loop, k: ast.expr) -> bool:
    """Every backward pass of the loop back-propagates a loss divided by ``k`` (at least one),
    and the loop never changes ``k`` (timm sets it to the last window's size for that window)."""
    if not loop.backwards:
        return False
    assigned = set(loop.assignments())
    for e in loop.backwards + loop.steps:
        for fn, _ in e.frame:  # a helper the loop runs (the epoch function an epoch loop calls)
            assigned.update(assignments(fn))
    if any(isinstance(n, ast.Name) and n.id in assigned for n in ast.walk(k)):
        return False
    return all(_divided(backward_tensor(b.node), k, loop.scope_of(b), 0) for b in loop.backwards)


def _divided(expr, k: ast.expr, assigns: dict, depth: int) -> bool:
    if expr is None or depth > 6:
        return False
    if isinstance(expr, tuple):  # ("aug", op, node): `loss /= K`
        return isinstance(expr[1], ast.Div) and ast.dump(expr[2].value) == ast.dump(k)
    if isinstance(expr, ast.Call) and terminal(expr.func) == "scale" and len(expr.args) == 1:
        return _divided(expr.args[0], k, assigns, depth + 1)  # GradScaler.scale(loss)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
        return ast.dump(expr.right) == ast.dump(k) or _divided(expr.left, k, assigns, depth + 1)
    if isinstance(expr, ast.Name):
        values = assigns.get(expr.id) or []
        inner = {**assigns, expr.id: []}  # `loss = loss / K` refers to the value before it
        return any(_divided(v, k, inner, depth + 1) for v in values)
    return False


def _remainder_steps(loop: Loop) -> Iterator[ast.Call]:
    """Steps of the loop's optimizers in the statements right after it (up to the first one that
    steps), in a block that does not rescale ``.grad`` first."""
    targets = {s.target for s in loop.steps}
    for stmts in loop.after[1:]:
        for stmt in stmts:
            if isinstance(stmt, _NOT_A_REMAINDER):
                return  # another loop (its steps are its own windows'), a definition
            calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call) and terminal(n.func) == "step"]
            stepped = [c for c in calls if _steps_one_of(c, targets)]
            if not stepped:
                if calls:
                    return
                continue
            if not _rescales_grad(stmt):
                yield stepped[0]
            return


_NOT_A_REMAINDER = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _steps_one_of(call: ast.Call, targets: set) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if "scaler" in terminal(func.value).lower():
        return bool(call.args) and text(call.args[0]) in targets
    return text(func.value) in targets


def _rescales_grad(stmt: ast.stmt) -> bool:
    """``p.grad.mul_(...)``, ``p.grad *= ...``, ``torch._foreach_mul_(grads, ...)`` in ``stmt``."""
    for n in ast.walk(stmt):
        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Mult, ast.Div)) and "grad" in text(n.target):
            return True
        if isinstance(n, ast.Call) and terminal(n.func) in ("mul_", "div_", "_foreach_mul_", "_foreach_div_"):
            if "grad" in text(n):
                return True
    return False
