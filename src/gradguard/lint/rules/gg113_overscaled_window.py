"""GG113 overscaled-window: every micro-batch of a window divided by K twice.

Decided from the program's structure, never from names:

* a framework that divides for the user: ``X.backward(loss / K)`` where ``X`` was built in the
  file with ``gradient_accumulation_steps=K`` (Accelerate's ``backward`` divides every loss by
  its ``gradient_accumulation_steps`` itself), the user's divisor being the same expression,
  the same literal value, or ``X.gradient_accumulation_steps``;
* a loop whose window is K micro-batches (a ``% K`` test or a ``range(K)`` micro-step loop) and
  whose every backward pass back-propagates a loss divided by K twice on every assignment
  that can reach it (``loss = f() / K`` then ``loss = loss / K``, a helper of the file that
  returns ``loss / K`` and its result divided again), or divided once while the gradients are
  divided by K again before the step (``p.grad.div_(K)``, ``p.grad /= K``,
  ``torch._foreach_div_(grads, K)`` in the block of the step).

A division by K once (under the framework's backward: none) is correct and not reported. No
fix: which of the two divisions the user meant to keep is not in the program (both give the
same code size; the learning rate may have been tuned on the bug).
"""

from __future__ import annotations

import ast
from typing import Dict, List, Optional

from .._ast import assignments, bind_arguments, terminal, text
from .._literals import literal_int
from .._model import Loop, Report, backward_tensor

CODE = "GG113"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg113_overscaled_window_bad.py", "gg113_overscaled_window_good.py")
#: No automatic fix (``gradguard lint --fix`` leaves its findings as they are).
FIX_SAFETY = None

_KEYWORD = "gradient_accumulation_steps"


def check_loop(loop: Loop, report: Report) -> None:
    if not loop.backwards:
        return
    done = set()
    # (a) a framework object built with gradient_accumulation_steps=K divides in its backward
    for b in loop.backwards:
        recv = _framework_receiver(b.node)
        if recv is None:
            continue
        built = _built_with_steps(loop.module.tree, recv)
        if built is None or literal_int(built[0], loop) == 1:
            continue
        k = built[0]
        same = _matcher(loop, k, recv, _aliases(loop.module.tree, built[1], k))
        if _divisions(b.node.args[0], same, loop.scope_of(b), loop, 0) >= 1:
            done.add(id(b.node))
            report(
                CODE,
                b.node,
                f"`{text(b.node.func)}(...)` divides the loss by its gradient_accumulation_steps (`{text(k)}`, "
                f"line {k.lineno}) itself, and the loss handed to it is already divided by it: every micro-batch is "
                f"scaled by 1/K twice, so each step's gradient is 1/K of the window's mean.",
                loop=loop, backward=b.node,
            )
    # (b) plain PyTorch: a window of K micro-batches, each loss divided by K twice (or once, and the
    # gradients again before the step)
    k = loop.window_size()
    if k is None or done:
        return
    same = _matcher(loop, k, None)
    counts = [_divisions(backward_tensor(b.node), same, loop.scope_of(b), loop, 0) for b in loop.backwards]
    if min(counts) >= 2:
        b = loop.backwards[0]
        report(
            CODE,
            b.node,
            f"Every backward pass of this window of `{text(k)}` micro-batches back-propagates a loss divided by "
            f"`{text(k)}` twice: each step's gradient is 1/K of the window's mean.",
            loop=loop, backward=b.node,
        )
        return
    if min(counts) >= 1:
        for step in loop.steps:
            root, bound = loop.node, same
            for fn, call in step.frame:  # a step in a helper: its parameters stand for the caller's arguments
                root, bound = fn, _bound(bound, bind_arguments(fn, call))
            div = _grad_divided_before(root, step.node, bound)
            if div is not None:
                report(
                    CODE,
                    div,
                    f"The gradients are divided by `{text(k)}` before `{text(step.node.func)}()`, and every loss of "
                    f"this window of `{text(k)}` micro-batches was already divided by it: each step's gradient is "
                    f"1/K of the window's mean.",
                    loop=loop, step=step.node,
                )
                return


def _framework_receiver(call: ast.AST) -> Optional[ast.expr]:
    """``X`` of ``X.backward(loss)`` (whether X is a framework object that divides is decided by how
    it was built, not by its name)."""
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute) or call.func.attr != "backward":
        return None
    return call.func.value if call.args else None


def _built_with_steps(tree: ast.AST, recv: ast.expr) -> Optional[ast.expr]:
    """``K`` of the one assignment in the file binding ``recv`` to a call with ``gradient_accumulation_steps=K``
    (None where it is bound to something else too: which object runs is not known)."""
    want = text(recv)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(text(t) == want for t in targets):
                kw = [w.value for w in getattr(n.value, "keywords", ()) if w.arg == _KEYWORD] if isinstance(n.value, ast.Call) else []
                found.append((kw[0], n) if kw else None)
    return found[0] if len(found) == 1 else None


def _aliases(tree: ast.AST, ctor: ast.stmt, k: ast.expr) -> set:
    """``self.X`` attributes assigned once, to K itself, in the function that builds the object
    (``self.k = k`` next to ``Accelerator(gradient_accumulation_steps=k)``)."""
    fn = next((f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(n is ctor for n in ast.walk(f))), None)
    if fn is None:
        return set()
    values: Dict[str, list] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    values.setdefault(text(t), []).append(n.value)
    return {name for name, vs in values.items() if len(vs) == 1 and ast.dump(vs[0]) == ast.dump(k)}


def _matcher(loop: Loop, k: ast.expr, recv: Optional[ast.expr], aliases: frozenset = frozenset()):
    dump, value = ast.dump(k), literal_int(k, loop)

    def same(expr: ast.expr) -> bool:
        if ast.dump(expr) == dump or (aliases and text(expr) in aliases):
            return True
        if recv is not None and isinstance(expr, ast.Attribute) and expr.attr == _KEYWORD and text(expr.value) == text(recv):
            return True
        return value is not None and literal_int(expr, loop) == value

    return same


def _divisions(expr, same, assigns: Dict[str, list], loop: Loop, depth: int) -> int:
    """How many times ``expr`` is at least divided by K on every assignment that can reach it."""
    if expr is None or depth > 6 or isinstance(expr, tuple):
        return 0
    if isinstance(expr, ast.Call) and terminal(expr.func) == "scale" and len(expr.args) == 1:
        return _divisions(expr.args[0], same, assigns, loop, depth + 1)  # GradScaler.scale(loss)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
        return int(same(expr.right)) + _divisions(expr.left, same, assigns, loop, depth + 1)
    fn = _helper(expr, loop)
    if fn is not None:
        returns = [r.value for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]
        if not returns or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return 0
        inner = {**bind_arguments(fn, expr), **assignments(fn)}
        return min(_divisions(r, _bound(same, bind_arguments(fn, expr)), inner, loop, depth + 1) for r in returns)
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
        start = min(_divisions(v, same, inner, loop, depth + 1) for v in bases)
        if len(transforms) != 1:
            return start  # none, or several of unknown order and conditions: count none of them
        t = transforms[0]
        if isinstance(t, tuple):
            return start + int(isinstance(t[1], ast.Div) and same(t[2].value))
        return start + _divisions(t, same, inner, loop, depth + 1)
    return 0


def _helper(expr, loop: Loop):
    """The function of the file a call runs: ``f(...)`` by name, ``self.f(...)`` a method of the loop's class."""
    if not isinstance(expr, ast.Call):
        return None
    if isinstance(expr.func, ast.Name):
        return loop.functions.get(expr.func.id)
    if isinstance(expr.func, ast.Attribute) and isinstance(expr.func.value, ast.Name) and expr.func.value.id == "self":
        return loop.methods.get(expr.func.attr)
    return None


def _bound(same, bound: Dict[str, list]):
    """``same`` inside a helper: a parameter stands for the caller's argument."""

    def inner(expr: ast.expr) -> bool:
        if isinstance(expr, ast.Name) and len(bound.get(expr.id) or ()) == 1:
            return same(bound[expr.id][0])
        return same(expr)

    return inner


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _grad_divided_before(root: ast.AST, step: ast.Call, same) -> Optional[ast.AST]:
    """A division of ``.grad`` by K in a statement before the step's, in the step's block."""
    parents = {}
    for n in ast.walk(root):
        for c in ast.iter_child_nodes(n):
            parents[id(c)] = n
    stmt = step
    while id(stmt) in parents and not isinstance(stmt, ast.stmt):
        stmt = parents[id(stmt)]
    parent = parents.get(id(stmt))
    block = next((b for b in (getattr(parent, f, None) for f in ("body", "orelse")) if isinstance(b, list) and any(s is stmt for s in b)), None)
    if block is None:
        return None
    for prev in block[: next(i for i, s in enumerate(block) if s is stmt)]:
        for n in ast.walk(prev):
            if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Div) and _is_grad(n.target) and same(n.value):
                return n
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and len(n.args) == 1 and same(n.args[0]):
                if n.func.attr == "div_" and _is_grad(n.func.value):
                    return n
            if isinstance(n, ast.Call) and terminal(n.func) == "_foreach_div_" and len(n.args) == 2 and same(n.args[1]):
                if any(_is_grad(g) for g in ast.walk(n.args[0])):  # `[p.grad for p in ...]` written in the call
                    return n
    return None


def _is_grad(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "grad"
