"""GG101 stale-gradient: a path through the iteration back-propagates and steps an
optimizer, but clears nothing that optimizer reads (per optimizer: clearing one of
two optimizers leaves the other's ``.grad`` growing)."""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Fix
from .._ast import body_nodes
from .._edits import FUNCS, LOOPS, Tree
from .._events import BACKWARD, CLEAR, MAYBE_CLEAR, READ, STEP, Event
from .._flow import Path, condition_key
from .._ast import terminal
from .._literals import top_level
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
                uncleared = _modules_left(loop, step, on_path)
                if uncleared:
                    at = p.events.index(step)
                    first = next((e for e in p.events[:at] if e.kind == BACKWARD), None)
                    report(
                        CODE,
                        step.node,
                        f"{describe(step, 'step')} reuses gradients an earlier step already applied: it holds the "
                        f"parameters of `{'`, `'.join(uncleared)}` too, and only the other modules' zero_grad() runs here.",
                        loop=loop, optimizer=step.target, step=step.node, backward=first.node if first else None,
                    )
                continue
            if _fresh_each_iteration(loop, step.target):
                continue
            relevant = [c for c in clears if loop.may_clear_for(c, step) and not _other_run(loop, c, p)]
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


def _modules_left(loop: Loop, step: Event, on_path) -> list:
    """The modules of an optimizer built over several (``SGD(list(enc.parameters()) +
    list(dec.parameters()))``) that no clearing on the path reaches, where every clearing there is
    one module's ``zero_grad()`` and the modules are separate objects: each bound once, in the
    loop's function or at module level, to a constructor call that names none of the others
    (``enc = Encoder(); dec = Decoder()``). Empty wherever that is not proven."""
    modules = loop.module.optimizer_modules.get((id(loop.scope), step.target), [])
    if len(modules) < 2:
        return []
    clears = [c for c in on_path if loop.may_clear_for(c, step)]
    if not clears or not all(c.kind == CLEAR and c.target in modules for c in clears):
        return []
    facts = loop.module.scope_facts(loop.scope).bound if loop.scope is not None else {}
    for name in modules:
        values = facts.get(name) or top_level(loop.module).bound.get(name, [])
        if not (name.isidentifier() and len(values) == 1 and _constructed(values[0])):
            return []
        if any(isinstance(n, ast.Name) and n.id in modules and n.id != name for n in ast.walk(values[0])):
            return []  # built from another of them: may contain it
    cleared = {c.target for c in clears}
    return [name for name in modules if name not in cleared]


def _other_run(loop: Loop, clear: Event, path: Path) -> bool:
    """The clearing sits in the other branch of a flag fixed for the whole run than the path
    took (``if use_amp: scaler.step(opt); opt.zero_grad() else: opt.step()``): a run never
    reaches both, so it clears nothing for this path's step."""
    for test, body in tests(clear):
        if isinstance(test, ast.expr) and loop.fixed_for_run(test):
            key, negated = condition_key(test)
            if path.decided(key) not in (None, body != negated):
                return True
    return False


def _fresh_each_iteration(loop, optimizer: Optional[str]) -> bool:
    """The optimizer is built in the iteration over parameters that the iteration builds too
    (``net = Net(); opt = SGD(net.parameters())``: a test per case): every step reads
    gradients that only this iteration's backward passes made, so none is stale."""
    if not optimizer or not optimizer.isidentifier():
        return False
    assigns = loop.assignments()
    made = assigns.get(optimizer)
    if not made or not all(isinstance(v, ast.Call) for v in made):
        return False

    def fresh(name: str, seen: frozenset) -> bool:
        values = assigns.get(name)
        if not values or name in seen:
            return False
        for v in values:
            if not isinstance(v, ast.AST):
                return False
            roots = _root_names(v)
            # a constructor (`Net(**case)`) or a value built from this iteration's names only
            if _constructed(v):
                continue
            if not roots or not all(fresh(r, seen | {name}) for r in roots):
                return False
        return True

    for call in made:
        params = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "params"), None)
        if params is None:
            return False
        roots = _root_names(params)
        if not roots or not all(fresh(r, frozenset()) for r in roots):
            return False
    return True


def _constructed(value: ast.AST) -> bool:
    """A new object: a class called (``Net(**case)``, ``nn.Linear(3, 2).double().to(dev)``)."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Call):
        value = value.func.value
    return isinstance(value, ast.Call) and terminal(value.func)[:1].isupper()


def _root_names(expr: ast.AST) -> set:
    """The names an expression reads data from (``p`` of ``{n: p for n, p in net.named_parameters()}``
    is bound inside it and does not count; ``list``/``filter`` and other builtins are not data)."""
    bound = {n.id for c in ast.walk(expr) if isinstance(c, ast.comprehension) for n in ast.walk(c.target) if isinstance(n, ast.Name)}
    called = {c.func.id for c in ast.walk(expr) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound - called


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
    if _writes_grad(d.loop.node) or any(e.kind == MAYBE_CLEAR for e in d.loop.events):
        # .grad is assigned (`p.grad = meta_delta`: Reptile's meta step) or maybe cleared by a call
        # the model cannot see into: it cannot prove where a clearing is harmless
        return None
    if d.loop.reads:
        # .grad is read (SAM's perturbation, a buffer, a rescaling). A read followed by another
        # backward pass before the step (SAM) needs a clearing between them that only the user
        # can place; otherwise right after the step comes after every read of the update
        if _read_then_backward(d.loop, call):
            return None
        return Fix(f"{message} after the step", (t.insert_after(stmt, clear),))
    between = [a for a in t.ancestors(backward) if t.contains(d.loop.node, a) and a is not d.loop.node]
    in_inner_loop = any(isinstance(a, LOOPS) and not t.contains(a, stmt) for a in between)
    if (
        d.loop.accumulates() or in_inner_loop or not t.alone(backward)
        or t.function_of(backward) is not t.function_of(stmt)
    ):
        return Fix(f"{message} after the step", (t.insert_after(stmt, clear),))
    return Fix(f"{message} before the update's first backward pass", (t.insert_before(backward, clear),))


def _closure(d: Diagnostic, call: ast.Call) -> Optional[ast.AST]:
    """The local function passed to ``step`` (LBFGS's closure), as the model resolved it."""
    arg = call.args[0]
    if not isinstance(arg, ast.Name):
        return None
    fn = d.loop.functions.get(arg.id)
    return fn if isinstance(fn, ast.FunctionDef) and not isinstance(fn.body[0], FUNCS) else None


def _writes_grad(loop_node: ast.AST) -> bool:
    """The loop assigns a gradient itself (``p.grad = expr``, ``p.grad += g``): a clearing would
    race with that write."""
    for n in body_nodes(loop_node):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            if any(isinstance(x, ast.Attribute) and x.attr == "grad" for x in ast.walk(target)):
                if not (isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value is None):
                    return True  # (`p.grad = None` is a clearing, which the model knows)
    return False


def _read_then_backward(loop: Loop, step_call: ast.AST) -> bool:
    """On some path to ``step_call``, code reads ``.grad`` and a backward pass follows the read."""
    for p in loop.paths:
        read = False
        for e in p.events:
            if e.node is step_call:
                break
            if e.kind == READ:
                read = True
            elif e.kind == BACKWARD and read:
                return True
    return False
