"""What each backward pass weighs in the gradient a step applies: its divisions by the window size.

A window of K micro-batches applies the mean of its passes when every pass is divided by K once:
on the loss (``loss / K``, through helpers that return it divided, ``loss /= K``), or on the
gradients before the step (``p.grad /= K``, ``p.grad.div_(K)``, ``torch._foreach_div_(grads, K)``,
in the step's helper with its parameter bound to the caller's K). The window rules read the same
count: GG111 (a short window whose passes are divided by the full K once), GG113 (twice).

K is matched by structure, never by name: the same expression, a parameter bound to it at the
call, or the same literal value.
"""

from __future__ import annotations

import ast
from typing import Dict, Iterable, Optional

from ._ast import assignments, bind_arguments, subtree, terminal, text
from ._events import SCALE, Event, classify_call, classify_statement
from ._literals import literal_int
from ._ast import child_nodes

_KEYWORD = "gradient_accumulation_steps"


def matcher(loop, k: ast.expr, recv: Optional[ast.expr] = None, aliases: frozenset = frozenset()):
    """``same(expr)``: ``expr`` is the window size ``k`` (the same text, an alias attribute, the
    framework object's ``gradient_accumulation_steps``, or the same literal value)."""
    dump, value = ast.dump(k), literal_int(k, loop)

    def same(expr: ast.expr) -> bool:
        if ast.dump(expr) == dump or (aliases and text(expr) in aliases):
            return True
        if recv is not None and isinstance(expr, ast.Attribute) and expr.attr == _KEYWORD and text(expr.value) == text(recv):
            return True
        return value is not None and literal_int(expr, loop) == value

    return same


def divisions(expr, same, assigns: Dict[str, list], loop, depth: int = 0) -> int:
    """How many times ``expr`` is at least divided by K on every assignment that can reach it."""
    if expr is None or depth > 6 or isinstance(expr, tuple):
        return 0
    if isinstance(expr, ast.Call) and terminal(expr.func) == "scale" and len(expr.args) == 1:
        return divisions(expr.args[0], same, assigns, loop, depth + 1)  # GradScaler.scale(loss)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
        return int(same(expr.right)) + divisions(expr.left, same, assigns, loop, depth + 1)
    fn = helper(expr, loop)
    if fn is not None:
        returns = [r.value for r in subtree(fn) if isinstance(r, ast.Return) and r.value is not None]
        if not returns or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return 0
        inner = {**bind_arguments(fn, expr), **assignments(fn)}
        return min(divisions(r, bound(same, bind_arguments(fn, expr)), inner, loop, depth + 1) for r in returns)
    if isinstance(expr, ast.Name):
        values = assigns.get(expr.id) or []
        if not values or any(v is None for v in values):
            return 0
        inner = {**assigns, expr.id: []}
        # `loss = loss / K` and `loss /= K` transform the value before them; the others are where it starts
        transforms = [v for v in values if isinstance(v, tuple) or _mentions(v, expr.id)]
        bases = [v for v in values if not (isinstance(v, tuple) or _mentions(v, expr.id))]
        if not bases:
            return 0
        start = min(divisions(v, same, inner, loop, depth + 1) for v in bases)
        if len(transforms) != 1:
            return start  # none, or several of unknown order and conditions: count none of them
        t = transforms[0]
        if isinstance(t, tuple):
            return start + int(isinstance(t[1], ast.Div) and same(t[2].value))
        return start + divisions(t, same, inner, loop, depth + 1)
    return 0


def helper(expr, loop):
    """The function of the file a call runs: ``f(...)`` by name, ``self.f(...)`` a method of the loop's class."""
    if not isinstance(expr, ast.Call):
        return None
    if isinstance(expr.func, ast.Name):
        return loop.functions.get(expr.func.id)
    if isinstance(expr.func, ast.Attribute) and isinstance(expr.func.value, ast.Name) and expr.func.value.id == "self":
        return loop.methods.get(expr.func.attr)
    return None


def bound(same, binding: Dict[str, list]):
    """``same`` inside a helper: a parameter stands for the caller's argument."""

    def inner(expr: ast.expr) -> bool:
        if isinstance(expr, ast.Name) and len(binding.get(expr.id) or ()) == 1:
            return same(binding[expr.id][0])
        return same(expr)

    return inner


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in subtree(node))


def _is_grad(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "grad"


def grad_division(node: ast.AST, same) -> bool:
    """``node`` divides ``.grad`` by K: ``p.grad /= K``, ``p.grad = p.grad / K``, ``p.grad.div_(K)``,
    ``torch._foreach_div_(grads, K)``."""
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div) and _is_grad(node.target):
        return same(node.value)
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and _is_grad(node.targets[0]):
        v = node.value
        return isinstance(v, ast.BinOp) and isinstance(v.op, ast.Div) and text(v.left) == text(node.targets[0]) and same(v.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) == 1 and same(node.args[0]):
        if node.func.attr == "div_" and _is_grad(node.func.value):
            return True
    if isinstance(node, ast.Call) and terminal(node.func) == "_foreach_div_" and len(node.args) == 2 and same(node.args[1]):
        return any(_is_grad(g) for g in subtree(node.args[0]))  # `[p.grad for p in ...]` written in the call
    return False


def grad_divided_before(root: ast.AST, step: ast.Call, same) -> Optional[ast.AST]:
    """A division of ``.grad`` by K in a statement before the step's, in the step's block."""
    parents = {}
    for n in subtree(root):
        for c in child_nodes(n):
            parents[id(c)] = n
    stmt = step
    while id(stmt) in parents and not isinstance(stmt, ast.stmt):
        stmt = parents[id(stmt)]
    parent = parents.get(id(stmt))
    block = next((b for b in (getattr(parent, f, None) for f in ("body", "orelse")) if isinstance(b, list) and any(s is stmt for s in b)), None)
    if block is None:
        return None
    for prev in block[: next(i for i, s in enumerate(block) if s is stmt)]:
        for n in subtree(prev):
            if grad_division(n, same):
                return n
    return None


def scale_events_divide(events: Iterable[Event], same) -> bool:
    """Every rescaling of ``.grad`` among ``events`` (at least one) divides by K, each in the
    frame of helpers it was reached through (a parameter bound to the caller's K)."""
    scales = [e for e in events if e.kind == SCALE]
    if not scales:
        return False
    for e in scales:
        inner = same
        for fn, call in e.frame:
            inner = bound(inner, bind_arguments(fn, call))
        if not grad_division(e.node, inner):
            return False
    return True


def loss_divisions(loop, same) -> int:
    """The divisions by K every backward pass of the loop carries on its loss (the fewest)."""
    from ._model import backward_tensor

    if not loop.backwards:
        return 0
    return min(divisions(backward_tensor(b.node), same, loop.scope_of(b), loop) for b in loop.backwards)


def pass_divisions(loop, k: ast.expr) -> int:
    """How many times each pass of the loop's windows is divided by ``k`` before its step: on the
    loss (the fewest over the backward passes) plus once where the loop's rescalings of
    ``.grad`` all divide by ``k``."""
    same = matcher(loop, k, None)
    return loss_divisions(loop, same) + int(scale_events_divide(loop.events, same))


def statement_grad_scale(stmts, loop, same, nones: frozenset = frozenset(), depth: int = 0) -> Optional[bool]:
    """How ``stmts`` (with the helpers of the file they call) rescale ``.grad``: None where they do
    not, True where every rescaling divides by K, False where one scales otherwise (by K / K',
    by the window's own count). A helper's ``if d is not None:`` is skipped where the call leaves
    ``d`` at its default None (``nones``)."""
    found = None

    def add(ok: Optional[bool]) -> None:
        nonlocal found
        if ok is not None:
            found = ok if found is None else (found and ok)

    for stmt in stmts:
        if isinstance(stmt, ast.If) and _not_none(stmt.test) in nones:
            add(statement_grad_scale(stmt.orelse, loop, same, nones, depth))
            continue
        kind = classify_statement(stmt)
        if kind is not None and kind[0] == SCALE:
            add(grad_division(stmt, same))
        for n in child_nodes(stmt):
            if isinstance(n, ast.stmt):
                continue
            for c in subtree(n):
                if not isinstance(c, ast.Call):
                    continue
                kind = classify_call(c)
                if kind is not None and kind[0] == SCALE:
                    add(grad_division(c, same))
                fn = helper(c, loop)
                if fn is not None and depth < 3 and isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    binding = bind_arguments(fn, c)
                    unset = frozenset(a.arg for a, d in _defaults(fn) if a.arg not in binding and isinstance(d, ast.Constant) and d.value is None)
                    add(statement_grad_scale(fn.body, loop, bound(same, binding), unset, depth + 1))
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(stmt, field, None)
            if isinstance(block, list) and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                add(statement_grad_scale([b for b in block if isinstance(b, ast.stmt)], loop, same, nones, depth))
    return found


def _not_none(test: ast.expr) -> Optional[str]:
    """``d`` of ``if d is not None:``."""
    if (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
        and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None
    ):
        return test.left.id
    return None


def _defaults(fn) -> list:
    args = fn.args.posonlyargs + fn.args.args
    pos = list(zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults))
    return pos + [(a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None]


def may_close_short(loop, k: ast.expr) -> bool:
    """A step of the loop may close a window of fewer than ``k`` micro-batches: its test also
    fires off the window's boundary (``... or i + 1 == len(loader)``), or a step after a loop that
    steps its windows applies the remainder (a micro-step loop's own step after it is whole);
    unless the function checks that the length divides by ``k``. A fix dividing every pass by
    ``k`` would weigh such a window K'/K of its mean (GG111): no certain fix there."""
    from ._model import steps_after, tests

    if loop.proves_whole_windows(k):
        return False
    if any(
        any(isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) for n in subtree(loop.resolve(test)))
        for s in loop.steps for test, _ in tests(s) if isinstance(test, ast.AST)
    ):
        return True
    return bool(loop.steps) and steps_after(loop)
