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
  ``torch._foreach_div_(grads, K)`` in the block of the step);
* the same through an object of a class the file defines: ``engine.backward(loss / K)`` whose
  method divides its loss by ``self.k`` again before ``loss.backward()``, its ``step`` closing
  the window on ``self.k``, with ``self.k`` set in ``__init__`` from what the construction hands
  in (a DeepSpeed-style engine written in the file): the divisions in the method and in the
  caller are counted each in its own scope.

A division by K once (under the framework's backward: none) is correct and not reported. No
fix: which of the two divisions the user meant to keep is not in the program (both give the
same code size; the learning rate may have been tuned on the bug).
"""

from __future__ import annotations

import ast
from typing import Dict, Optional

from .._ast import called, bind_arguments, nodes_of, text
from .._ast import assignments, bind_arguments as _arguments, nodes_of as _nodes_of
from .._literals import attribute_binding, literal_int
from .._events import BACKWARD, CLEAR, PARTIAL, STEP
from .._model import Loop, Report, backward_tensor
from .._weights import bound as _bound
from .._weights import divisions as _divisions
from .._weights import grad_divided_before as _grad_divided_before
from .._weights import matcher as _matcher

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
                f"`{called(b.node)}` divides the loss by its gradient_accumulation_steps (`{text(k)}`, "
                f"line {k.lineno}) itself, and the loss handed to it is already divided by it: every micro-batch is "
                f"scaled by 1/K twice, so each step's gradient is 1/K of the window's mean.",
                loop=loop, backward=b.node,
            )
    # (b) plain PyTorch: a window of K micro-batches, each loss divided by K twice (or once, and the
    # gradients again before the step)
    k = loop.window_size()
    if k is None or done or _wiped(loop):
        return
    same = _matcher(loop, k, None)
    same = _through_classes(loop, k, same)
    counts = [max(_divisions(backward_tensor(b.node), same, loop.scope_of(b), loop, 0), _framed_divisions(loop, b, same))
              for b in loop.backwards]
    if min(counts) >= 2:
        b = loop.backwards[0]
        report(
            CODE,
            b.frame[0][1] if b.frame else b.node,  # the loop's own line (`engine.backward(loss)`) where a helper runs it
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
                    f"The gradients are divided by `{text(k)}` before `{called(step.node)}`, and every loss of "
                    f"this window of `{text(k)}` micro-batches was already divided by it: each step's gradient is "
                    f"1/K of the window's mean.",
                    loop=loop, step=step.node,
                )
                return


def _class_of(loop: Loop, fn: ast.AST) -> Optional[ast.ClassDef]:
    """The class of the file whose body defines method ``fn``."""
    return next((c for c in _nodes_of(loop.module.tree, ast.ClassDef) if any(s is fn for s in c.body)), None)


def _self_value(loop: Loop, expr: ast.expr, fn: ast.AST) -> Optional[int]:
    """The int ``self.x`` holds in method ``fn`` where the file proves it (set once in ``__init__``
    from what every construction hands in, :func:`attribute_binding`)."""
    cls = _class_of(loop, fn)
    if cls is None or not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        return None
    value = attribute_binding(expr, loop, cls)
    return value.value if isinstance(value, ast.Constant) and type(value.value) is int else None


def _through_classes(loop: Loop, k: ast.expr, same):
    """``same`` where the window's size is an attribute of an object of another class the loop calls
    (an engine whose ``step`` closes the window on ``self.k``): the attribute's proved value, and the
    attributes of the methods the loop runs that hold the same value, count as K."""
    frames = [fn for e in list(loop.steps) + list(loop.backwards) for fn, _ in e.frame]
    value = literal_int(k, loop)
    if value is None:
        value = next((v for v in (_self_value(loop, k, fn) for fn in frames) if v is not None), None)
    if value is None or value <= 1:
        return same

    def inner(expr: ast.expr) -> bool:
        return same(expr) or any(_self_value(loop, expr, fn) == value for fn in frames) or literal_int(expr, loop) == value

    return inner


def _framed_divisions(loop: Loop, b, same) -> int:
    """How many times the loss a backward pass inside helpers (``engine.backward(loss)`` running
    ``loss = loss / self.k; loss.backward()``) back-propagates is divided by K: in each helper, the
    divisions of its parameter there, plus those of the argument the caller hands in, in the
    caller's scope (each scope read on its own: the caller's ``loss`` is not the helper's)."""
    if not b.frame:
        return 0
    expr, total = backward_tensor(b.node), 0
    for i in range(len(b.frame) - 1, -1, -1):
        fn, call = b.frame[i]
        own = assignments(fn)
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs] if hasattr(fn, "args") else []
        if not (isinstance(expr, ast.Name) and expr.id in params):
            return total + _divisions(expr, same, own, loop, 0)  # made inside the helper
        # the parameter starts as the caller's argument: a base with no divisions of its own here
        scope = {**own, expr.id: [ast.Name(id=" argument", ctx=ast.Load())] + list(own.get(expr.id, []))}
        total += _divisions(expr, same, scope, loop, 0)
        handed = _arguments(fn, call).get(expr.id)
        if not handed:
            return 0
        expr = handed[0]
    return total + _divisions(expr, same, loop.assignments(), loop, 0)


def _wiped(loop: Loop) -> bool:
    """A clearing of every gradient runs after the backward passes: on every micro-batch of a
    window (the window holds one pass), or between the last backward pass and the step on every
    path that steps (the step applies nothing). GG102's finding; no window is divided twice."""
    windows = loop.window_paths()
    if windows and all(any(e.kind == CLEAR and e.target != PARTIAL for e in m.events) for m in windows):
        return True
    stepping = [p for p in loop.step_paths if any(e.kind == BACKWARD for e in p.events)]
    for p in stepping:
        kinds = [(e.kind, e.target) for e in p.events]
        last = max(i for i, (kind, _) in enumerate(kinds) if kind == BACKWARD)
        first_step = next((i for i, (kind, _) in enumerate(kinds) if kind == STEP and i > last), None)
        if first_step is None or not any(kind == CLEAR and t != PARTIAL for kind, t in kinds[last + 1:first_step]):
            return False
    return bool(stepping)


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
    for n in nodes_of(tree, (ast.Assign, ast.AnnAssign)):
        if n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(text(t) == want for t in targets):
                kw = [w.value for w in getattr(n.value, "keywords", ()) if w.arg == _KEYWORD] if isinstance(n.value, ast.Call) else []
                found.append((kw[0], n) if kw else None)
    return found[0] if len(found) == 1 else None


def _aliases(tree: ast.AST, ctor: ast.stmt, k: ast.expr) -> set:
    """``self.X`` attributes assigned once, to K itself, in the function that builds the object
    (``self.k = k`` next to ``Accelerator(gradient_accumulation_steps=k)``)."""
    # kept on the statement (``k`` is its keyword's value): every loop of the file with a framework
    # backward pass asks again
    cached = ctor.__dict__.get("_gg_aliases")
    if cached is None:
        cached = ctor.__dict__["_gg_aliases"] = frozenset(_find_aliases(tree, ctor, k))
    return set(cached)


def _find_aliases(tree: ast.AST, ctor: ast.stmt, k: ast.expr) -> set:
    # (a function's lines hold the statement before its statements are searched for it)
    fn = next((f for f in nodes_of(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
               if f.lineno <= ctor.lineno <= (f.end_lineno or f.lineno)
               and any(n is ctor for n in nodes_of(f, (ast.Assign, ast.AnnAssign)))), None)
    if fn is None:
        return set()
    values: Dict[str, list] = {}
    for n in nodes_of(fn, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    values.setdefault(text(t), []).append(n.value)
    return {name for name, vs in values.items() if len(vs) == 1 and ast.dump(vs[0]) == ast.dump(k)}
