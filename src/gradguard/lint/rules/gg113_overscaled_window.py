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
from typing import Dict, Optional

from .._ast import called, bind_arguments, nodes_of, text
from .._literals import literal_int
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
                    f"The gradients are divided by `{text(k)}` before `{called(step.node)}`, and every loss of "
                    f"this window of `{text(k)}` micro-batches was already divided by it: each step's gradient is "
                    f"1/K of the window's mean.",
                    loop=loop, step=step.node,
                )
                return


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
