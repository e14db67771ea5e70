"""GG114 leaked-pass: a backward pass before a loop that clears only after its steps.

A loop whose iteration back-propagates before it clears (``backward(); step();
zero_grad()``) relies on ``.grad`` being empty when it starts. Walking back from
the loop through the statements that run before it in its function (out of an
``if``, ``with`` or ``try`` around it, not out of an enclosing loop or the
function), the first statement that touches the gradient buffer decides: a
backward pass (or a call of a helper of the file that back-propagates and neither
steps nor clears, evaluation code) leaks into the loop's first step; a clearing,
a step or anything the linter cannot see into ends the search silently.
A pass that reaches only tensors made from constants above the loop is no leak when no
optimizer can hold them (used nowhere else), or when the loop updates by hand only other
tensors, each made fresh there (``y.backward(v)`` on ``x``, then a loop training ``weights``).
"""

from __future__ import annotations

import ast
from typing import Dict, Iterator, List, Optional

from ...findings import Fix
from .._ast import child_nodes, text
from .._edits import Tree
from .._events import BACKWARD, CLEAR, MANAGED, MAYBE_CLEAR, READ, STEP, classify_call, classify_statement
from .._model import Diagnostic, Loop, Report, backward_tensor
from .._ast import subtree

CODE = "GG114"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg114_leaked_pass_bad.py", "gg114_leaked_pass_good.py")
#: How far ``gradguard lint --fix`` may go with its fix: "safe" (``--fix``) or "unsafe" (``--unsafe-fixes``).
FIX_SAFETY = "unsafe"

_BUFFER = (BACKWARD, CLEAR, MAYBE_CLEAR, MANAGED)
_STOP = (CLEAR, MAYBE_CLEAR, STEP, MANAGED, READ)


def check_loop(loop: Loop, report: Report) -> None:
    if loop.kind not in ("for", "while") or not loop.steps or not loop.step_paths:
        return
    for path in loop.step_paths:
        first = next((e for e in path.events if e.kind in _BUFFER), None)
        if first is None or first.kind != BACKWARD:
            return  # some iteration clears (or hands the window to gradguard) before it back-propagates
    targets = {e.target for e in loop.steps}
    module = loop.module
    parents = _parents(loop.scope if loop.scope is not None else module.tree)
    stray = _before(loop.node, parents, module)
    scope = loop.scope if loop.scope is not None else module.tree
    if stray is None or _reaches_no_parameter(stray, scope, module) or _apart_from_the_updates(stray, scope, loop):
        return
    report(
        CODE,
        stray,
        f"`{text(stray.func)}(...)` back-propagates before the loop at line {loop.node.lineno}, which clears only "
        f"after its steps: this gradient is added to the first step's.",
        loop=loop,
        backward=stray,
        optimizer=next(iter(targets)) if len(targets) == 1 else None,
    )


def _parents(root: ast.AST) -> Dict[int, ast.AST]:
    """id of each statement under ``root`` -> the node holding it (only statements are asked about).
    Kept on ``root``: every loop of a function (or of the module) asks."""
    out = root.__dict__.get("_gg114_parents")
    if out is None:
        out = root.__dict__["_gg114_parents"] = {}
        pending = [root]
        while pending:
            node = pending.pop()
            for child in child_nodes(node):
                if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                    out[id(child)] = node
                    pending.append(child)
    return out


def _before(stmt: ast.stmt, parents, module) -> Optional[ast.Call]:
    """The stray backward call before ``stmt``, or None (see the module's docstring)."""
    while True:
        parent = parents.get(id(stmt))
        if parent is None:
            return None
        block = next((b for b in (getattr(parent, f, None) for f in ("body", "orelse", "finalbody")) if isinstance(b, list) and any(s is stmt for s in b)), None)
        if block is None:
            return None
        for prev in reversed(block[: next(i for i, s in enumerate(block) if s is stmt)]):
            kinds = list(_events(prev, module))
            if not kinds:
                continue
            if isinstance(prev, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.With, ast.AsyncWith)):
                if any(k in _STOP or k == "other" for k, _ in kinds):
                    return None
                backward = [call for k, call in kinds if k == BACKWARD]
                if backward:
                    return backward[-1]
            return None
        if isinstance(parent, (ast.If, ast.With, ast.AsyncWith, ast.Try)):
            stmt = parent
            continue
        return None  # the top of a function, a class, a loop, or the module


def _events(stmt: ast.stmt, module, depth: int = 0) -> Iterator[tuple]:
    """(kind, call) of the gradient-buffer events of a statement; a helper of the file counts as the
    events of its body ("other" for a helper that steps or clears; a backward inside it as a backward)."""
    # kept per statement and depth: each loop walks back over the statements before it, and a helper's
    # body is read at each of its calls
    memo = module.__dict__.setdefault("_gg114_events", {})
    key = (id(stmt), depth)
    if key not in memo:
        memo[key] = list(_own_events(stmt, module, depth))
    return iter(memo[key])


def _own_events(stmt: ast.stmt, module, depth: int) -> Iterator[tuple]:
    kind = classify_statement(stmt)
    if kind is not None:
        yield kind[0], stmt
    for node in _walk(stmt):
        if not isinstance(node, ast.Call):
            continue
        found = classify_call(node, frozenset(module.optimizer_names))
        if found is not None:
            yield found[0], node
            continue
        fn = module.functions.get(node.func.id) if isinstance(node.func, ast.Name) else None
        if fn is not None and depth < 2:
            inner = [k for s in fn.body for k in _events(s, module, depth + 1)]
            if any(k in _STOP or k == "other" for k, _ in inner):
                yield "other", node
            elif any(k == BACKWARD for k, _ in inner):
                yield BACKWARD, node


def _reaches_no_parameter(call: ast.Call, scope: ast.AST, module) -> bool:
    """The pass differentiates only tensors it makes itself (``torch.empty(1, requires_grad=True).backward()``,
    a warm-up of autograd): built from constants by torch's factories, through names assigned that way and
    used nowhere else, so no optimizer can hold the leaves its gradient lands on and no step applies it."""
    fn = module.functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
    if fn is not None:  # a helper of the file that back-propagates: every pass in it
        inner = [n for n in _walk(fn) if isinstance(n, ast.Call) and n is not call
                 and (classify_call(n, frozenset(module.optimizer_names)) or ("",))[0] == BACKWARD]
        return bool(inner) and all(_reaches_no_parameter(n, fn, module) for n in inner)
    tensor = backward_tensor(call)
    if tensor is None:
        return False
    assigned = _assigned(scope)
    names: set = set()
    if not _closed(tensor, module, assigned, names):
        return False
    # every use of those names is its own binding or this pass: no optimizer or model is given one
    binds = {id(t) for name in names for b in assigned[name] for t in b.targets}
    inside = {id(n) for root in [call] + [b.value for name in names for b in assigned[name]] for n in subtree(root)}
    return not any(
        isinstance(n, ast.Name) and n.id in names and id(n) not in binds and id(n) not in inside for n in _walk(scope)
    )


def _assigned(scope: ast.AST) -> Dict[str, list]:
    """Name -> the plain assignments of ``scope`` that bind it."""
    assigned: Dict[str, list] = {}
    for n in _walk(scope):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    assigned.setdefault(t.id, []).append(n)
    return assigned


def _closed(e: ast.AST, module, assigned: Dict[str, list], names: set, depth: int = 0) -> bool:
    """``e`` is built from constants by functions of ``import``ed modules (torch's factories, `os.environ`
    for a device string), through names every binding of which is built so (collected in ``names``):
    whatever leaves it holds are tensors made right there, no model's parameters."""
    modules = module.__dict__.get("_gg114_modules")
    if modules is None:
        modules = module._gg114_modules = {a.asname or a.name.split(".")[0] for n in module.tree.body
                                           if isinstance(n, ast.Import) for a in n.names}
    if isinstance(e, ast.Constant):
        return True
    if isinstance(e, ast.Name):
        if e.id in modules:
            return True
        if e.id in names:
            return True  # being checked already (`y = y * 2`): its other bindings decide
        binds = assigned.get(e.id, [])
        if not binds or depth > 4:
            return False  # a parameter, a global or a loop variable: it may be a model's
        names.add(e.id)
        return all(len(b.targets) == 1 and _closed(b.value, module, assigned, names, depth + 1) for b in binds)
    if isinstance(e, ast.Call):
        return _closed(e.func, module, assigned, names, depth) and all(
            _closed(a, module, assigned, names, depth) for a in [*e.args, *(k.value for k in e.keywords)])
    if isinstance(e, (ast.Attribute, ast.Subscript, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List, ast.Starred, ast.Slice,
                      ast.JoinedStr, ast.FormattedValue)):
        return all(_closed(c, module, assigned, names, depth) for c in child_nodes(e)
                   if not isinstance(c, (ast.expr_context, ast.operator, ast.unaryop)))
    return False


def _apart_from_the_updates(call: ast.Call, scope: ast.AST, loop: Loop) -> bool:
    """The pass reaches only tensors made from constants in ``scope`` (names N), and the loop updates
    by hand (``w -= lr * w.grad``) only tensors U it names, each bound only to a tensor made there
    and none of them in N: different objects, so the stray gradient is never applied (a tutorial's
    ``y.backward(v)`` on ``x`` above a loop that trains ``weights``). An optimizer's step, or an update
    of anything else, may hold any tensor: not decided here."""
    module = loop.module
    tensor = backward_tensor(call)
    if tensor is None or module.functions.get(getattr(call.func, "id", None)) is not None:
        return False
    assigned = _assigned(scope)
    leaves: set = set()
    if not _closed(tensor, module, assigned, leaves):
        return False
    updated = set()
    for e in loop.steps:
        if e.target != "<manual>" or e.frame:
            return False
        node = e.node
        if isinstance(node, ast.AugAssign):
            root = node.target
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            root = node.func.value
        else:
            return False
        if isinstance(root, ast.Attribute) and root.attr == "data":
            root = root.value
        if not isinstance(root, ast.Name):
            return False
        updated.add(root.id)
    if not updated or updated & leaves or _other_bindings(scope, updated):
        return False
    # each updated tensor made by a call from constants: a fresh object, none of the pass's leaves
    return all(
        all(len(b.targets) == 1 and isinstance(b.value, ast.Call) and _closed(b.value, module, assigned, set())
            for b in assigned.get(u, ())) and assigned.get(u)
        for u in updated)


def _other_bindings(scope: ast.AST, names: set) -> bool:
    """Whether ``scope`` binds one of ``names`` otherwise than by a plain assignment or an augmented one
    (a loop or ``with`` target, a parameter, an import, a ``global``/``nonlocal``, a walrus)."""
    for n in subtree(scope):
        if isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            if any(isinstance(t, ast.Name) and t.id in names for t in subtree(n.target)):
                return True
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            if any(isinstance(t, ast.Name) and t.id in names for t in subtree(n.optional_vars)):
                return True
        elif isinstance(n, ast.arg) and n.arg in names:
            return True
        elif isinstance(n, (ast.Global, ast.Nonlocal)) and names & set(n.names):
            return True
        elif isinstance(n, (ast.Import, ast.ImportFrom)) and names & {a.asname or a.name for a in n.names}:
            return True
        elif isinstance(n, ast.NamedExpr) and n.target.id in names:
            return True
    return False


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` without entering nested functions, classes or lambdas."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for c in child_nodes(n):
            if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                todo.append(c)


def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    """Clear with the loop's optimizer right before the loop (after whatever reads the stray gradient).

    Only with one stepped optimizer that is bound before the loop: a function parameter, an attribute
    of ``self``, or a name assigned before the loop in the same function.
    """
    loop, opt = d.loop, d.optimizer
    if loop is None or not opt or opt == "<manual>" or not t.starts_line(loop.node):
        return None
    head = opt.split(".")[0]
    scope = loop.scope
    bound = head == "self"
    if scope is not None and isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = scope.args
        bound = bound or head in {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    root = scope if scope is not None else loop.module.tree
    bound = bound or any(
        isinstance(n, (ast.Assign, ast.AnnAssign)) and n.lineno < loop.node.lineno
        and any(isinstance(x, ast.Name) and x.id == head for tgt in (n.targets if isinstance(n, ast.Assign) else [n.target]) for x in subtree(tgt))
        for n in subtree(root)
    )
    if not bound:
        return None
    # unsafe: it changes the first update, which is the point, but a pass meant as the loop's first
    # micro-batch would be dropped by it
    return Fix(f"Clear `{opt}` before the loop", (t.insert_before(loop.node, f"{opt}.zero_grad(set_to_none=True)"),), "unsafe")
