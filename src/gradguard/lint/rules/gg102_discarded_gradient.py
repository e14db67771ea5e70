"""GG102 discarded-gradient: clearing between backward and step, on every micro-batch
of a window, or inside a nested micro-step loop whose window steps after it (nanoGPT's shape)."""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Fix
from .._edits import Tree
from .._events import BACKWARD, CLEAR, MANAGED, PARTIAL, READ, STEP, Event
from .._ast import nodes_of, target_names, text
from .._flow import Path, TooComplex, Walker, condition_key
from .._literals import literal_int
from .._model import Diagnostic, Loop, Report, describe, is_boundary_test, tests
from .._ast import subtree

CODE = "GG102"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg102_discarded_gradient_bad.py", "gg102_discarded_gradient_good.py")
#: How far ``gradguard lint --fix`` may go with its fix: "safe" (``--fix``) or "unsafe" (``--unsafe-fixes``).
FIX_SAFETY = "safe"
#: Also read a function taken for one update of a loop the file does not show (see .._per_call).
PER_CALL = True


def check_loop(loop: Loop, report: Report) -> None:
    _with_an_accumulator(loop, report)
    if not loop.trains:
        return
    _between_backward_and_step(loop, report)
    _every_micro_batch(loop, report)
    _before_closing_backward(loop, report)
    _inside_micro_step_loop(loop, report)
    _before_a_carried_window(loop, report)
    _before_the_remainder_step(loop, report)


def _with_an_accumulator(loop: Loop, report: Report) -> None:
    """``optimizer.zero_grad()`` on every iteration of a loop whose micro-batches go through a
    gradguard ``Accumulator`` (``acc.backward(loss)``, then ``acc.step()``), as a hand loop ported to
    it keeps it: whether at the top, between the two calls or after them, some clearing falls
    between two micro-batches of a window and throws the earlier ones away (the Accumulator clears
    after each step itself). The Accumulator is the object built by ``Accumulator(...)`` (over the
    cleared optimizer, or the model it holds); ``steps=1`` windows lose nothing."""
    passes = [e for e in loop.managed if _is_pass(e.node) and _not_nested(e)]
    reported = set()
    for clear in loop.full_clears:
        if id(clear.node) in reported or not _not_nested(clear):
            continue
        for b in passes:
            call = _constructor(loop, b.target)
            if call is None or _one_step(call) or not _wipes(loop, clear, call):
                continue
            together = [p for p in loop.complete if clear in p.events and b in p.events]
            with_pass = [p for p in loop.complete if b in p.events]
            if not together or len(together) != len(with_pass):
                continue  # only on some iterations (`if acc.step(): opt.zero_grad()`, `if acc.micro_step == 0:`)
            reported.add(id(clear.node))
            report(
                CODE,
                clear.node,
                f"{describe(clear, 'zero_grad')} runs on every micro-batch of a loop that the gradguard Accumulator "
                f"`{b.target}` steps: it clears what the window's earlier micro-batches accumulated before the "
                "Accumulator's step uses it (the Accumulator clears the gradients after each step itself).",
                loop=loop, clear=clear.node, accum=b.node,
            )
            break


def _constructor(loop: Loop, name: str) -> Optional[ast.Call]:
    """The ``Accumulator(...)`` call bound to ``name``: the one in the loop's own function, else the
    only one (or several that agree) in the file; None when ``name`` is no Accumulator."""
    bound = loop.module.accumulator_calls.get(name, [])
    calls = [call for scope, call in bound if scope is loop.scope] or [call for _, call in bound]
    if not calls or len({ast.dump(c) for c in calls}) > 1:
        return None
    return calls[0]


def _is_pass(call: ast.AST) -> bool:
    """``acc.backward(loss)`` or ``accumulate_batch(..., acc=acc)``, not ``acc.step()`` / ``acc.flush()``."""
    func = getattr(call, "func", None)
    return not (isinstance(func, ast.Attribute) and func.attr in ("step", "flush"))


def _not_nested(e: Event) -> bool:
    """Not inside a loop nested in the training loop (a clearing once per inner loop of a window's micro-batches)."""
    return all(entry[0] != "loop" for entry in e.stack)


def _one_step(call: ast.Call) -> bool:
    steps = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "steps"), None)
    return isinstance(steps, ast.Constant) and steps.value == 1


def _wipes(loop: Loop, clear: Event, call: ast.Call) -> bool:
    """The clearing empties the Accumulator's gradients: its optimizer's, or those of the model that
    optimizer (or the Accumulator's ``model=``) holds."""
    optimizer = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "optimizer"), None)
    model = next((k.value for k in call.keywords if k.arg == "model"), None)
    if optimizer is None or not clear.target:
        return False
    owners = {text(optimizer), loop.optimizer_model(text(optimizer))}
    if model is not None:
        owners.add(text(model))
    return clear.target in owners


def _between_backward_and_step(loop: Loop, report: Report) -> None:
    for p in loop.paths:
        # a read of .grad between the backward and the clearing (SAM's perturbation,
        # a copy into a buffer) used the gradients: clearing them afterwards is deliberate
        evs = [e for e in p.events if e.kind in (BACKWARD, STEP, CLEAR, READ)]
        for i, e in enumerate(evs):
            if e.kind != CLEAR or e.target == PARTIAL:
                continue
            before = next((x for x in reversed(evs[:i]) if x.kind != CLEAR), None)
            after = next((x for x in evs[i + 1 :] if x.kind != CLEAR), None)
            if (
                before is not None and before.kind == BACKWARD
                and after is not None and after.kind == STEP
                and loop.related(e, after) and dominates(e, after)
            ):
                report(
                    CODE,
                    e.node,
                    f"{describe(e, 'zero_grad')} runs between backward() and {describe(after, 'step')}: "
                    f"it clears the gradients before the step uses them.",
                    loop=loop, optimizer=after.target, backward=before.node, step=after.node, clear=e.node,
                )
            elif before is not None and before.kind == BACKWARD and after is not None and after.kind == BACKWARD:
                step = _wiped_pass_step(loop, evs, i)
                if step is not None and not _read_between(loop, before, e):
                    # no fix: whether the update was meant to apply the earlier pass is the user's choice
                    report(
                        CODE,
                        e.node,
                        f"{describe(e, 'zero_grad')} runs between two backward() passes of one update: it clears the "
                        f"earlier pass's gradients before {describe(step, 'step')} uses them, and nothing read them.",
                        loop=loop, optimizer=step.target, backward=before.node, clear=e.node,
                    )


def _read_between(loop: Loop, backward: Event, clear: Event) -> bool:
    """On some path of the loop, code reads ``.grad`` after ``backward`` and before ``clear``: the
    gradients are used by hand there (a copy into a buffer under ``if p.grad is not None:``, a branch the
    walker forks on though every run takes it), so the clearing is deliberate, not a discarding."""
    for p in loop.paths:
        nodes = [e.node for e in p.events]
        if backward.node in nodes and clear.node in nodes:
            i, j = nodes.index(backward.node), len(nodes) - 1 - nodes[::-1].index(clear.node)
            if any(e.kind == READ for e in p.events[i + 1 : j]):
                return True
    return False


def _pass_read(loop: Loop, prefix: tuple) -> bool:
    """On some path, the events of one pass of the nested loop ``prefix`` leads into read ``.grad`` after
    the pass's last backward pass."""
    for p in loop.paths:
        inner = [e for e in p.events if e.stack[: len(prefix)] == prefix]
        last = max((i for i, e in enumerate(inner) if e.kind == BACKWARD), default=None)
        if last is not None and any(e.kind == READ for e in inner[last + 1 :]):
            return True
    return False


def _wiped_pass_step(loop: Loop, evs: list, at: int) -> Optional[Event]:
    """The step that the clearing ``evs[at]`` (right after a backward pass, right before another) comes
    before, when it wipes all of the earlier pass's gradients unused: one optimizer and one cleared
    object in the loop, related, the clearing a full one that runs whenever the step does, and the next
    step of the path after further backward passes with no clearing or read of ``.grad`` between."""
    clear = evs[at]
    if not loop._single:
        return None
    for x in evs[at + 1:]:
        if x.kind in (CLEAR, READ):
            return None
        if x.kind == STEP:
            return x if loop.related(clear, x) and dominates(clear, x) else None
    return None


def _every_micro_batch(loop: Loop, report: Report) -> None:
    windows = loop.window_paths()
    if not windows:
        return
    reported = set()
    for clear in loop.full_clears:
        # a clearing that runs on every iteration (under flags fixed for the whole loop at most)
        fixed = all(entry[0] != "loop" and isinstance(entry[0], ast.expr) and not loop.varies(entry[0]) for entry in clear.stack)
        if not fixed and not _on_every_path(loop, clear) and not _branch_of_a_stepping_path(loop, clear):
            continue
        if id(clear.node) in reported or not any(clear in m.events and not _read_before(m, clear) for m in windows):
            continue
        step = next((s for s in loop.steps if loop.related(clear, s)), None)
        if step is not None:
            reported.add(id(clear.node))
            report(
                CODE,
                clear.node,
                f"{describe(clear, 'zero_grad')} runs on every micro-batch while the step runs only when an "
                f"accumulation window closes: each micro-batch's gradients are cleared before a step uses them.",
                loop=loop, optimizer=step.target, step=step.node, clear=clear.node,
            )


def _on_every_path(loop: Loop, clear: Event) -> bool:
    """The same clearing call runs on every path through the iteration that back-propagates,
    outside any nested loop, though from different branches: a closure of the loop body called
    in both arms of ``if has_no_sync and not need_update: with model.no_sync(): _backward(loss)
    else: _backward(loss)``."""
    def same(e: Event) -> bool:
        return e.kind == CLEAR and e.node is clear.node and all(entry[0] != "loop" for entry in e.stack)

    backs = [p for p in loop.paths if any(e.kind == BACKWARD for e in p.events)]
    return bool(backs) and all(any(same(e) for e in p.events) for p in backs)


def _branch_of_a_stepping_path(loop: Loop, clear: Event) -> bool:
    """Every branch the clearing sits in is taken, the same way, by a path that steps, and none
    is a window's boundary test: ``if self.scaler is not None: scaler.scale(loss).backward() else:
    loss.backward(); opt.zero_grad()`` with the step under ``if (i + 1) % K == 0`` after it. The
    branch is then the program's configuration on the stepping micro-batch as on the others, not
    what tells them apart, so the clearing runs on the window's other micro-batches too (a
    ``continue`` that skips the step on the clearing's branch leaves no such stepping path)."""
    entries = list(clear.stack)
    if not entries or any(e[0] == "loop" or not isinstance(e[0], ast.expr) for e in entries):
        return False
    written = _written_in(loop.node)
    for test, taken in ((e[0], e[1]) for e in entries):
        if loop.boundary(test) or is_boundary_test(test):
            return False
        if any(isinstance(n, (ast.Name, ast.Attribute)) and text(n) in written for n in subtree(test)):
            return False  # the loop itself changes what the test reads (`args.fp16 = step > 3`): no claim
        k, negated = condition_key(test)
        value = taken != negated
        if not any(s.decided(k) == value for s in loop.step_paths):
            return False
    return True


def _written_in(node: ast.AST) -> set:
    """Source texts of the names and attributes that statements inside ``node`` bind."""
    cached = node.__dict__.get("_gg_written")
    if cached is None:
        cached = set()
        for n in ast.walk(node):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(
                n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)) else []
            stack = list(targets)
            while stack:  # the bound names and attributes themselves (`self.n = ...` binds `self.n`, not `self`)
                t = stack.pop()
                if isinstance(t, (ast.Tuple, ast.List)):
                    stack.extend(t.elts)
                elif isinstance(t, (ast.Starred, ast.Subscript)):
                    stack.append(t.value)
                elif isinstance(t, (ast.Name, ast.Attribute)):
                    cached.add(text(t))
        node.__dict__["_gg_written"] = cached
    return cached


def _read_before(path, clear) -> bool:
    """Code read ``.grad`` after the last backward before ``clear`` (Opacus' virtual step moves
    it into the user's own buffer): the gradients were kept, not discarded."""
    events = path.events[: path.events.index(clear)]
    last = max((i for i, e in enumerate(events) if e.kind == BACKWARD), default=-1)
    return any(e.kind == READ for e in events[last + 1 :])


def _before_closing_backward(loop: Loop, report: Report) -> None:
    """A clearing that runs only when the window closes, before that micro-batch's backward:
    it wipes what the window's earlier micro-batches accumulated (``zero_grad()`` before
    ``accelerator.backward(loss)`` inside ``accelerator.accumulate``)."""
    windows = loop.window_paths()
    if not windows or any(READ in m.kinds() for m in windows):
        return
    on_micro = {id(e.node) for m in windows for e in m.events}
    for p in loop.step_paths:
        if not any(_may_precede(loop, m, p) for m in windows):
            continue  # no micro-batch of a window can run before this path: nothing is pending to wipe
        events = p.events
        for i, clear in enumerate(events):
            if clear.kind != CLEAR or clear.target == PARTIAL or id(clear.node) in on_micro:
                continue
            if any(e.kind in (BACKWARD, STEP) for e in events[:i]):
                continue  # after this iteration's backward: the between-backward-and-step case
            backward = next((e for e in events[i + 1 :] if e.kind in (BACKWARD, STEP)), None)
            if backward is None or backward.kind != BACKWARD:
                continue
            step = next((e for e in events[i + 1 :] if e.kind == STEP and loop.related(clear, e)), None)
            if step is None:
                continue
            report(
                CODE,
                clear.node,
                f"{describe(clear, 'zero_grad')} runs when the accumulation window closes, before that micro-batch's "
                f"backward(): it clears what the window's earlier micro-batches accumulated before "
                f"{describe(step, 'step')} uses it.",
                loop=loop, optimizer=step.target, backward=backward.node, step=step.node, clear=clear.node,
            )


def _before_a_carried_window(loop: Loop, report: Report) -> None:
    """A clearing at the top of an outer loop's body (an epoch), before an inner training loop whose steps
    all wait for a window test that reads a counter the inner loop updates and that was set before the outer
    loop (``last_opt_step``, ``global_step``): the windows run on across outer passes, so the inner loop can
    end with micro-batches pending, and nothing after it in the outer body steps them; the clearing at the
    next outer pass throws them away (the epoch's last, unfinished window)."""
    body = loop.node.body if isinstance(loop.node, (ast.For, ast.AsyncFor, ast.While)) else []
    for at, stmt in enumerate(body):
        call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
        if call is None or not isinstance(call.func, ast.Attribute) or call.func.attr != "zero_grad":
            continue
        clear = next((e for e in loop.full_clears if e.node is call and not e.stack), None)
        if clear is None:
            continue
        for later in body[at + 1:]:
            inner = next((l for l in loop.module.loops if l.node is later), None)
            if inner is None or not inner.steps or not inner.backwards:
                if _steps_in(later, loop):
                    break  # a step between the clearing and the inner loop: nothing left pending
                continue
            steps = [e for e in inner.steps if loop.related(clear, e)]
            counter = _carried_counter(loop, inner, steps)
            if counter is None or any(_steps_in(s, loop) for s in body[body.index(later) + 1:]):
                break
            call.gg_carried_window = loop.node  # its fix: clear once, before this loop
            report(
                CODE,
                call,
                f"{describe(clear, 'zero_grad')} runs at the start of every pass of this loop, while the inner loop's "
                f"accumulation windows run on across its passes (its step waits on `{counter}`, set before this loop): "
                "the micro-batches of the window still open when the inner loop ends are cleared before a step uses them.",
                loop=loop, optimizer=steps[0].target, step=steps[0].node, clear=call,
            )
            break


def _before_the_remainder_step(loop: Loop, report: Report) -> None:
    """A clearing after the loop, before the step that applies the last, partial window (``if
    len(batches) % k: optimizer.zero_grad(); optimizer.step()``): the loop can end with backward
    passes waiting for a step (some iteration back-propagates and skips the step on a window
    test), and nothing back-propagates between this clearing and the step, so it wipes them and
    the step applies nothing. Read from the events of the statements after the loop (up to the
    next loop or definition), helpers and closures followed as in the loop."""
    if not loop.window_paths():
        return
    stmts = []
    for stmt in loop.after[1] if len(loop.after) > 1 else ():
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            break
        stmts.append(stmt)
    if not stmts:
        return
    m = loop.module
    walker = Walker(m.interesting, loop.functions, loop.methods, frozenset(m.optimizer_names), m.instances,
                    m.mentions_grad, None, frozenset(m.accumulators), m.unbound)
    walker._enclosing = loop.scope
    try:
        paths = walker.block(stmts, [Path()], ())
    except (TooComplex, RecursionError):
        return
    reported = set()
    for p in paths:
        evs = [e for e in p.events if e.kind in (BACKWARD, STEP, CLEAR, READ)]
        for i, clear in enumerate(evs):
            if clear.kind != CLEAR:
                break  # a step, a backward or a read first: what was pending was used (or is added to)
            if clear.target == PARTIAL:
                continue
            after = next((x for x in evs[i + 1:] if x.kind != CLEAR), None)
            if after is None or after.kind != STEP or not any(loop.related(clear, s) for s in loop.steps):
                continue
            if not loop.related(clear, after):
                continue
            # a clearing reached through a helper points at its call after the loop (the helper's own line
            # may be the loop's finding); its fix would move a call, not a clearing: none is offered
            inside = bool(clear.frame) or bool(after.frame)
            node = clear.frame[0][1] if clear.frame else clear.node
            if id(node) in reported:
                continue
            reported.add(id(node))
            report(
                CODE,
                node,
                f"{describe(clear, 'zero_grad')} runs after the loop, before {describe(after, 'step')} that applies the last, "
                "partial window: it clears the backward passes still waiting for a step, so that step applies nothing "
                "of them.",
                loop=loop, optimizer=after.target, step=None if inside else after.node, clear=clear.node,
            )


def _carried_counter(loop: Loop, inner: Loop, steps) -> Optional[str]:
    """The name that every step of ``inner`` waits on through a varying test, assigned in ``inner`` (not its loop
    variable) and also before ``loop`` in its function: a window counter carried across ``loop``'s passes."""
    if not steps or len(steps) != len(inner.steps):
        return None
    own = set(target_names(inner.node.target)) if isinstance(inner.node, (ast.For, ast.AsyncFor)) else set()
    assigned = inner.assignments()
    outer_scope = loop.scope if loop.scope is not None else loop.module.tree
    outside = {
        t for n in subtree(outer_scope) if isinstance(n, (ast.Assign, ast.AnnAssign))
        and not (loop.node.lineno <= n.lineno <= loop.node.end_lineno)
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) for t in target_names(t)
    }
    found = None
    for step in steps:
        guards = [t for t, _ in tests(step) if isinstance(t, ast.expr) and inner.varies(t)]
        names = {n.id for g in guards for n in subtree(g) if isinstance(n, ast.Name)}
        carried = sorted(n for n in names if n in assigned and n not in own and n in outside)
        if not carried:
            return None
        found = found or carried[0]
    return found


def _steps_in(stmt: ast.stmt, loop: Loop) -> bool:
    """``stmt`` steps an optimizer: a ``.step(...)`` call of an optimizer the model knows, in it or in a helper
    of the file it calls (one level)."""
    for n in subtree(stmt):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if n.func.attr == "step" and (loop.is_optimizer(text(n.func.value)) or n.args):
                return True
            helper = loop.callee(n)
            if helper is not None and any(
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "step"
                and loop.is_optimizer(text(c.func.value)) for c in subtree(helper)):
                return True
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            helper = loop.callee(n)
            if helper is not None and any(
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "step"
                and loop.is_optimizer(text(c.func.value)) for c in subtree(helper)):
                return True
    return False


def _may_precede(loop: Loop, micro, path) -> bool:
    """Whether the window's micro path ``micro`` can run in an iteration before ``path``: the
    two agree on every decision that stays fixed over the loop (``if use_accum:`` ... ``else:``
    are two loops, and a clearing in the plain one wipes nothing the other accumulated)."""
    return all(path.decided(k) in (v, None) for k, v, t in micro.decisions if not loop.varies(t))


def _inside_micro_step_loop(loop: Loop, report: Report) -> None:
    """``for micro_step in range(accum): zero_grad(); loss.backward()`` then ``step()``."""
    for p in loop.complete:
        for clear in p.events:
            if clear.kind != CLEAR or clear.target == PARTIAL:
                continue
            depth = max((i + 1 for i, entry in enumerate(clear.stack) if entry[0] == "loop"), default=0)
            inner = clear.stack[depth - 1] if depth else None
            if not depth or not all(_on_every_backward_pass(loop, entry, inner[1]) for entry in clear.stack[depth:]):
                continue  # only a clearing that runs on every pass of its nested loop that back-propagates
            if _runs_at_most_once(loop, inner[1]):
                continue  # `for i in range(GENER_ITERS)` with `GENER_ITERS = 1`: no earlier pass to clear
            in_inner = [e for e in p.events if len(e.stack) >= depth and e.stack[:depth] == clear.stack[:depth]]
            if any(e.kind == STEP for e in in_inner):
                continue
            # a backward pass that runs whenever the clearing does, after it (`if torch.isfinite(loss):
            # optimizer.zero_grad(); loss.backward()`)
            at = p.events.index(clear)
            after = p.events[at + 1 :]
            if not any(e.kind == BACKWARD and e.stack[: len(clear.stack)] == clear.stack for e in after if e in in_inner):
                # or a backward pass of the same pass before it, its gradients unread in between: the
                # clearing moved to just after `backward()` wipes every micro-batch (the step applies nothing)
                before = [e for e in p.events[:at] if e in in_inner]
                last = max((i for i, e in enumerate(before) if e.kind == BACKWARD), default=None)
                if last is None or any(e.kind == READ for e in before[last + 1 :]):
                    continue
                if _read_between(loop, before[last], clear):
                    continue  # read by hand on another path (`if p.grad is not None: buf.copy_(p.grad)`)
            elif _pass_read(loop, clear.stack[:depth]):
                # the pass's gradients are read by hand after its last backward (GEM copies each memory
                # task's gradient into its own column): clearing at the next pass's start wipes nothing unused
                continue
            step = next(
                (s for s in p.events[p.events.index(clear) :] if s.kind == STEP and inner not in s.stack and loop.related(clear, s)),
                None,
            )
            if step is None or not _step_follows(loop, tests(step), tests(clear)):
                continue
            report(
                CODE,
                clear.node,
                f"{describe(clear, 'zero_grad')} runs on every pass of the micro-step loop while "
                f"{describe(step, 'step')} runs once after it: only the last micro-batch's gradients reach the step.",
                loop=loop, optimizer=step.target, step=step.node, clear=clear.node,
            )


def _runs_at_most_once(loop: Loop, loop_id: int) -> bool:
    """The nested loop (the one whose id the walker's stack holds) runs its body at most once on the
    path without exceptions: every pass ends by ``break`` / ``return`` (an out-of-memory retry
    ``while``, whose handler shrinks the chunk and tries again from a cleared state), or it is ``for
    ... in range(n)`` where ``n`` (or ``stop - start``) is an int the file binds once to a literal <= 1
    (a module constant ``GENER_ITERS = 1``). A clearing on each of its passes then wipes no earlier pass."""
    m = loop.module
    nested = m.__dict__.get("_loops_by_id")
    if nested is None:
        nested = m.__dict__["_loops_by_id"] = {id(n): n for n in nodes_of(m.tree, (ast.For, ast.AsyncFor, ast.While))}
    node = nested.get(loop_id)
    if node is None:
        return False
    if _always_leaves(node.body) and not any(isinstance(n, ast.Continue) for n in _own_statements(node.body)):
        return True
    it = getattr(node, "iter", None)
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and 1 <= len(it.args) <= 2 and not it.keywords):
        return False
    bounds = [literal_int(a, loop) for a in it.args]
    if any(b is None for b in bounds):
        return False
    start, stop = (0, bounds[0]) if len(bounds) == 1 else bounds
    return stop - start <= 1


def _always_leaves(stmts: list) -> bool:
    """Running ``stmts`` to their end always leaves the loop around them (``break``, ``return``,
    ``raise``), exception handlers aside: ``try: ... except OOM: shrink() else: break``."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Break, ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return _always_leaves(last.body) and _always_leaves(last.orelse)
    if isinstance(last, ast.Try):
        return _always_leaves(last.finalbody) or _always_leaves(last.body) or _always_leaves(last.orelse)
    if isinstance(last, (ast.With, ast.AsyncWith)):
        return _always_leaves(last.body)
    return False


def _own_statements(stmts: list):
    """The statements of ``stmts`` and of their blocks, not entering nested loops, definitions or exception handlers."""
    pending = list(stmts)
    while pending:
        stmt = pending.pop()
        yield stmt
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        for field in ("body", "orelse", "finalbody"):  # a handler that retries is the unusual path
            pending += getattr(stmt, field, [])


def _step_follows(loop: Loop, step_tests: list, clear_tests: list) -> bool:
    """The step runs after the micro-step loop whenever the clearing ran in it, but for a check
    made at the step alone (``if not isfinite(grad_norm): warn() else: step()``, not a window
    test): the step's branches begin with the clearing's. Two ``if`` statements on a flag fixed
    for the run (``if scaler is not None:`` around the backward in the micro-step loop and again
    around the step after it) taken the same way are one branch."""
    def key(entry) -> tuple:
        test, taken = entry[0], entry[1]
        if isinstance(test, ast.expr) and loop.fixed_for_run(test):
            k, negated = condition_key(test)
            return k, taken != negated
        return id(test), taken

    shared = 0
    while shared < min(len(step_tests), len(clear_tests)) and key(step_tests[shared]) == key(clear_tests[shared]):
        shared += 1
    extra = step_tests[shared:]
    return shared == len(step_tests) or (
        shared == len(clear_tests)
        and all(isinstance(t[0], ast.expr) and loop.varies(t[0]) and not is_boundary_test(t[0]) for t in extra)
    )


def _on_every_backward_pass(loop: Loop, entry, micro_id: Optional[int] = None) -> bool:
    """An ``if`` branch inside the micro-step loop that may be taken on every pass (``if
    torch.isfinite(loss):``, ``if n_tokens > 0:`` on a count the pass starts afresh), not one that
    picks a pass of the window (``if micro_step == 0:``, a window test, a flag the loop sets): a
    clearing under it wipes the passes before."""
    test, taken = entry[0], entry[1]
    if not isinstance(test, ast.expr) or is_boundary_test(test):
        return False
    if loop.fixed_for_run(test):
        return True  # `if scaler is not None: ... else: ...`: the run takes one branch on every pass
    if taken is not True:
        return False
    # a loop's position (`i` of `range(...)` or of `enumerate(...)`), not the item it hands out
    # (`for batch in loader:` ... `if batch.numel() > 0:` holds on any pass)
    counters = {n for e in subtree(loop.node) if isinstance(e, (ast.For, ast.AsyncFor)) for n in _position_names(e)}
    assigned = loop.assignments()
    fresh = _bound_each_pass(loop, micro_id)
    for n in subtree(test):
        if isinstance(n, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in n.ops) and not any(
            isinstance(c, ast.Constant) and c.value is None for c in n.comparators
        ):
            return False  # `== k` picks passes
        if isinstance(n, ast.Name) and (
            n.id in counters
            # a flag (`first = False`), unless the pass binds it afresh at its top (a count of this pass)
            or (n.id not in fresh and any(isinstance(v, ast.Constant) for v in assigned.get(n.id, ())))
        ):
            return False
    return True


def _position_names(loop_node: ast.AST) -> list:
    """The names a ``for`` loop binds to its position: every target of ``range(...)``, the first of
    ``enumerate(...)``; a loop over anything else binds items (its names are then no position)."""
    it = loop_node.iter
    func = it.func if isinstance(it, ast.Call) else None
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name == "range":
        return target_names(loop_node.target)
    if name == "enumerate":
        target = loop_node.target
        return target_names(target.elts[0]) if isinstance(target, (ast.Tuple, ast.List)) and target.elts else []
    return []


def _bound_each_pass(loop: Loop, micro_id: Optional[int]) -> set:
    """Names whose every binding to a constant is a statement of the micro-step loop's own body,
    outside any ``if`` or nested loop: set afresh at each pass (``n_tokens = 0`` then counted), so a
    test on them reads the pass, not its position in the window."""
    m = loop.module
    nested = m.__dict__.get("_loops_by_id")
    if nested is None:
        nested = m.__dict__["_loops_by_id"] = {id(n): n for n in nodes_of(m.tree, (ast.For, ast.AsyncFor, ast.While))}
    node = nested.get(micro_id)
    if node is None:
        return set()
    top, pending = [], list(node.body)
    while pending:
        stmt = pending.pop()
        top.append(stmt)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            pending += stmt.body
    each = {n for stmt in top if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Constant)
            for tg in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]) for n in target_names(tg)}
    elsewhere = {n for stmt in subtree(loop.scope if loop.scope is not None else loop.node)
                 if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Constant) and stmt not in top
                 for tg in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]) for n in target_names(tg)}
    return each - elsewhere


def dominates(outer: Event, inner: Event) -> bool:
    """``outer`` runs whenever ``inner`` does: its branches are a prefix of ``inner``'s."""
    if any(s[0] == "loop" for s in outer.stack):  # in a nested loop: runs a number of times
        return False
    return inner.stack[: len(outer.stack)] == outer.stack


# --- the fix ---------------------------------------------------------------------
def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    """GG102 discarded-gradient: move the clearing to just after the step that ends the window.

    The model names the clearing and the step of the same optimizer that ends its window. The
    clearing statement (with its comment) moves below that step; where the step is already
    followed by a clearing of the same object, the misplaced one is only deleted.
    """
    if d.step is None and d.accum is not None:  # a clearing in an Accumulator's loop: it clears after each step itself
        clear = t.statement_of(d.clear)
        if not t.alone(clear):
            return None
        return Fix(f"Delete `{t.segment(clear)}` (the Accumulator clears the gradients after each step)", (t.delete(clear),))
    if d.step is None:
        return None  # a clearing before the remainder's step through helpers: moving a call is no proven fix
    outer = getattr(d.clear, "gg_carried_window", None)
    if outer is not None:
        return _clear_before(t, d, outer)
    step_node = d.step
    if d.loop is not None and _flag_branches(d.loop, d.clear) != _flag_branches(d.loop, d.step):
        # the clearing and the step sit in different branches of a flag fixed for the run
        # (`if use_amp: scaler.step(opt) else: opt.step()`): the clearing goes after the step of
        # its own branch, the one the same run takes; none or several of them: no fix
        want = _flag_branches(d.loop, d.clear)
        same = {id(e.node): e.node for e in d.loop.steps if e.target == d.optimizer and _flag_branches(d.loop, e.node) == want}
        if len(same) != 1:
            return None
        (step_node,) = same.values()
    clear, step = t.statement_of(d.clear), t.statement_of(step_node)
    if not t.alone(clear) or not t.alone(step) or t.contains(clear, step):
        return None
    if t.function_of(clear) is not t.function_of(step):
        return None  # the clearing sits in a helper (or the step does): moving a line across functions is no fix
    follower = t.next_statement(step)
    if follower is not None and _clears(follower, d.clear):
        return Fix("Delete the clearing that discards the gradients (the step already clears after itself)", (t.delete(clear),))
    text = t.statement_text(clear, t.indent(step))
    return Fix(
        f"Move `{t.segment(clear).splitlines()[0].rstrip(':')}` to just after `{t.segment(step)}`",
        (t.delete(clear), t.insert_after(step, text.lstrip(" \t"))),
    )


def _clear_before(t: Tree, d: Diagnostic, outer: ast.stmt) -> Optional[Fix]:
    """A clearing at the start of each epoch whose windows run on across epochs: it moves to just before the
    epoch loop (the gradients start empty, as before, and no open window is cleared). Only where another
    clearing of the same gradients follows the window's step (otherwise nothing would clear between windows)."""
    clear = t.statement_of(d.clear)
    loop = d.loop
    if loop is None or not t.alone(clear) or t.function_of(clear) is not t.function_of(outer):
        return None
    if not any(c.node is not d.clear and loop.related(c, s) for c in loop.full_clears for s in loop.steps):
        return None
    text = t.statement_text(clear, t.indent(outer))
    return Fix(
        f"Move `{t.segment(clear).splitlines()[0]}` to just before the loop",
        (t.delete(clear), t.insert_before(outer, text.lstrip(" \t"))),
    )


def _flag_branches(loop: Loop, node: ast.AST) -> frozenset:
    """``(test key, value)`` of the flags fixed for the whole run (``if use_amp:``) whose branch
    the event at ``node`` sits in."""
    for e in loop.events:
        if e.node is node:
            return frozenset(
                (condition_key(test)[0], body != condition_key(test)[1])
                for test, body in tests(e) if isinstance(test, ast.expr) and loop.fixed_for_run(test)
            )
    return frozenset()


def _clears(stmt: ast.stmt, call: ast.AST) -> bool:
    """``stmt`` is the same clearing call as ``call`` (same receiver)."""
    value = getattr(stmt, "value", None)
    return (
        isinstance(stmt, ast.Expr) and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
        and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
        and value.func.attr == call.func.attr and ast.dump(value.func.value) == ast.dump(call.func.value)
    )
