"""GG116 clip-not-applied: a gradient clip placed where no step applies what it clips.

Read from the program model's paths of one iteration, in the order they run: for a
clip (``clip_grad_norm_``, ``clip_grad_value_``, ``clip_grads_with_norm_``,
``clip_gradients``) in the loop's body, the nearest gradient event before it (the
previous iteration's last one when none precedes it) and the nearest after it (the
next iteration's first one when none follows). On every path that steps, a clip
preceded by a step or a clearing and followed by a clearing or a backward pass
limits nothing: it acts on a gradient already applied, or on one the next pass has not
filled yet. Only the paths that run the clip are judged (a path that took the other side of
an ``if`` around it never does): a clip in a branch whose step the model does not see is
left alone. A clip preceded by a backward pass on some path (between the pass and its
step, or inside a window: GG115's) is left alone, as is a clip whose threshold is
infinite (a norm read for a log), a clip in a nested function or inner loop, and a
loop whose steps a framework makes (``accelerator.accumulate``).

Lightning with automatic optimization calls ``training_step`` for the loss and only then
runs the backward pass, the clip hook (``configure_gradient_clipping``) and the step: a
clip in the ``training_step`` of a ``LightningModule`` that leaves optimization to
Lightning acts on the previous step's gradient, already applied (or on nothing).
"""

from __future__ import annotations

import ast
from typing import Iterator, List, Optional, Tuple

from .._ast import terminal, text
from .._events import BACKWARD, CLEAR, MAYBE_CLEAR, PARTIAL, STEP
from .._flow import condition_key
from .._frameworks import is_lightning_module, is_manual_lightning
from .._model import Loop, Module, Report
from .._ast import subtree
from .._ast import child_nodes

CODE = "GG116"
#: Its fixture pair in tests/rule_pairs/: code that must fire it, correct code that must not.
FIXTURES = ("gg116_clip_not_applied_bad.py", "gg116_clip_not_applied_good.py")
#: No automatic fix: moving the clip between the backward pass and the step is the user's edit to make.
FIX_SAFETY = None

_CLIPS = frozenset({"clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_", "clip_gradients"})
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.For, ast.AsyncFor, ast.While)
_KINDS = {BACKWARD: BACKWARD, STEP: STEP, CLEAR: CLEAR, MAYBE_CLEAR: CLEAR}


def check_loop(loop: Loop, report: Report) -> None:
    if not loop.backwards or not loop.steps or loop.managed or loop.accumulate or not loop.step_paths:
        return
    for clip, where in _placed_clips(loop):
        # only the paths the clip can be on: a path that took the other side of an `if` around the
        # clip never runs it (a clip in the GradScaler branch is not judged by the plain branch's step)
        sides = _sides(loop.node, clip)
        verdicts = [_around(path.events, where) for path in loop.step_paths
                    if all(path.decided(key) in (None, value) for key, value in sides)]
        if not verdicts or any(v is None for v in verdicts):
            continue
        if any(before == BACKWARD for before, _ in verdicts) or any(after == STEP for _, after in verdicts):
            _other_optimizers_clip(loop, clip, where, sides, report)
            continue  # between a pass and a step on some path: it clips what a step applies
        before = verdicts[0][0]
        report(
            CODE,
            clip,
            f"`{text(clip.func)}(...)` runs after {'the step' if before == STEP else 'the clearing'} and before "
            f"the next {'clearing' if verdicts[0][1] == CLEAR else 'backward pass'}: no step applies what it "
            "clips, so no update is clipped.",
            loop=loop,
        )


def _other_optimizers_clip(loop: Loop, clip: ast.Call, where: Tuple, sides, report: Report) -> None:
    """A clip of one module's parameters (``clip_grad_norm_(dis.parameters(), 5)``) that one optimizer of the
    loop holds, where that optimizer's own next gradient event, on every path that runs the clip, is its
    clearing: the step after the clip (another optimizer's, ``gen_opt.step()``) applies none of what it
    clips, and the clipped gradient is cleared unused. Judged on that optimizer's events alone (its steps,
    the clearings that may wipe its gradient) and every backward pass."""
    arg = clip.args[0] if clip.args else next((k.value for k in clip.keywords if k.arg == "parameters"), None)
    if not (isinstance(arg, ast.Call) and terminal(arg.func) == "parameters" and isinstance(arg.func, ast.Attribute)):
        return
    module = text(arg.func.value)
    holders = [name for name, modules in loop._visible_optimizers().items() if module in modules]
    if len(holders) != 1:
        return
    own = [e for e in loop.steps if e.target == holders[0]]
    if not own:
        return
    verdicts = []
    for path in loop.step_paths:
        if not all(path.decided(key) in (None, value) for key, value in sides):
            continue
        events = [e for e in path.events if e.kind == BACKWARD or (e.kind == STEP and e.target == holders[0])
                  or (e.kind in (CLEAR, MAYBE_CLEAR) and loop.may_clear_for(e, own[0]))]
        verdicts.append(_around(events, where))
    if verdicts and all(v is not None and v[0] == BACKWARD and v[1] == CLEAR for v in verdicts):
        report(
            CODE,
            clip,
            f"`{text(clip.func)}(...)` clips the gradients of `{module}`, which only `{holders[0]}` holds, and "
            f"`{holders[0]}`'s gradients are cleared before it next steps: no step applies what it clips, so no "
            "update is clipped (the step right after the clip holds other parameters).",
            loop=loop,
        )


def _placed_clips(loop: Loop) -> Iterator[Tuple[ast.Call, Tuple]]:
    """Each clip of the iteration with its place in the order of the iteration's events (see ``_key``): those
    of the loop's body, and those of a helper (function, method) the walk entered for its gradient events,
    placed by the chain of calls that reached it. A helper reached by several chains whose verdicts differ is
    left alone (a clip is reported only where every place it runs from agrees)."""
    for clip in _clips(loop.node.body):
        yield clip, (_position(clip),)
    chains, places = {}, {}
    for path in loop.step_paths:
        for e in path.events:
            if e.frame and all(call is not None for _, call in e.frame):
                chains.setdefault(tuple(id(c) for _, c in e.frame), e.frame)
    own = _functions_of(loop.module)
    for frame in chains.values():
        if id(frame[-1][0]) not in own:
            # a helper of another file (an imported class's method): its clip's line is in that file, and
            # the events this walk saw of it need not be all of its own (its own optimizer's cycle): not judged
            continue
        calls = tuple(_position(call) for _, call in frame)
        for clip in _clips(frame[-1][0].body):
            places.setdefault(id(clip), (clip, []))[1].append(calls + (_position(clip),))
    for clip, wheres in places.values():
        if len(wheres) == 1:
            yield clip, wheres[0]


def _functions_of(module: Module) -> set:
    """The ids of the function definitions of ``module``'s own file (once per module)."""
    own = module.__dict__.get("_gg116_functions")
    if own is None:
        own = module.__dict__["_gg116_functions"] = {
            id(n) for n in subtree(module.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return own


def check_module(module: Module, report: Report) -> None:
    for cls in module.classes.values():
        if "training_step" not in {f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}:
            continue
        if not is_lightning_module(cls, module.project, module.filename) or is_manual_lightning(cls, module.project, module.filename):
            continue
        step = next(f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "training_step")
        for clip in _clips(step.body):
            report(
                CODE,
                clip,
                f"`{text(clip.func)}(...)` runs in `{cls.name}.training_step`, which Lightning calls before its "
                "backward pass: it clips the previous step's gradient, already applied, and no update is clipped "
                "(clip in `configure_gradient_clipping`, or give the Trainer `gradient_clip_val`).",
            )


def _around(events, where: Tuple) -> Optional[Tuple[str, str]]:
    """The kinds of the nearest gradient events before and after ``where`` on one path, wrapping around
    the iteration (None when the path has none)."""
    seq = [(_key(e), _KINDS[e.kind]) for e in events if e.kind in _KINDS and not (e.kind == CLEAR and e.target == PARTIAL)]
    if not seq:
        return None
    before = [k for pos, k in seq if pos < where]
    after = [k for pos, k in seq if pos > where]
    return (before[-1] if before else seq[-1][1]), (after[0] if after else seq[0][1])


def _sides(loop: ast.AST, clip: ast.Call) -> List[Tuple[str, bool]]:
    """``(key, value)`` of every ``if`` of the loop's body around ``clip``: the truth of its test
    (in :func:`condition_key`'s words) on any path that runs the clip."""
    out: List[Tuple[str, bool]] = []

    def visit(node) -> bool:
        for child in child_nodes(node):
            if child is clip:
                return True
            if isinstance(node, ast.If) and child is not node.test:
                arm = any(child is b for b in node.body)
                if visit(child):
                    key, negated = condition_key(node.test)
                    out.append((key, arm != negated))
                    return True
                continue
            if visit(child):
                return True
        return False

    visit(loop)
    return out


def _key(e) -> Tuple:
    """Where an event runs in the iteration: the positions of the calls that reached it (outermost first, in
    their own functions), then its own; compared as tuples, events of one helper call keep their order
    inside it. A chain with an unknown call is placed at its first call, as a whole."""
    if e.frame and any(call is None for _, call in e.frame):
        return (_position(e.frame[0][1]),)
    return tuple(_position(call) for _, call in e.frame) + (_position(e.node),)


def _position(node: ast.AST) -> Tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def _clips(stmts) -> Iterator[ast.Call]:
    """Clip calls in ``stmts`` with a finite threshold, nested functions and inner loops left out."""
    todo = list(stmts)
    while todo:
        n = todo.pop()
        if isinstance(n, _NESTED):
            continue
        if isinstance(n, ast.Call) and terminal(n.func) in _CLIPS and not _unbounded(n):
            yield n
        todo.extend(child_nodes(n))


def _unbounded(call: ast.Call) -> bool:
    """``clip_grad_norm_(ps, float("inf"))``, ``math.inf``, ``torch.inf``: a norm read, not a clip."""
    threshold = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg in ("max_norm", "clip_value", "gradient_clip_val")), None)
    if threshold is None:
        return False
    if isinstance(threshold, ast.Attribute) and threshold.attr == "inf":
        return True
    if isinstance(threshold, ast.Name) and threshold.id == "inf":
        return True
    return (isinstance(threshold, ast.Call) and terminal(threshold.func) == "float" and threshold.args
            and isinstance(threshold.args[0], ast.Constant) and str(threshold.args[0].value).lower() in ("inf", "+inf"))
