"""GG203 detached-loss-term: a term added into the loss that a backward pass differentiates, whose value was
read out of a tensor that carries the graph (``.detach()``, ``.item()``, ``.data``, ``float()``, a tensor
rebuilt from such numbers) and holds no graph itself: it changes the loss's value and no gradient.

What holds a graph is read by the one model of it (:mod:`.._graph_value`): a term is judged only when that
model *proves* it graph-free, and only when the proof passes through a cut of a value the model does not
prove graph-free (so a constant, a number from the data or a value computed under ``torch.no_grad()`` is
no finding). The sum must also hold a term that carries the graph (a loss of graph-free terms alone makes
``backward()`` fail at once), and a cut term that reads a value the sum's other terms read too is a value
correction (``y_soft + (y_hard - y_soft).detach()``), not reported; nor what is subtracted.
"""

from __future__ import annotations

import ast
from typing import Iterator, List, Optional, Set, Tuple

from .._ast import nodes_of, subtree, target_names, terminal, text
from .._events import CUTTING_ATTRS
from .._graph_value import _callee, _comprehension_binding, _ctx, _own_nodes, graph_free, reaching
from .._model import Module, Report, backward_tensor

CODE = "GG203"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg203_detached_loss_term_bad.py", "gg203_detached_loss_term_good.py")
#: No automatic fix (``gradguard lint --fix`` leaves its findings as they are).
FIX_SAFETY = None

_MAX_DEPTH = 6
#: Builtins that turn a tensor into a Python number.
_TO_NUMBER = frozenset({"float", "int"})
_COMPS = (ast.ListComp, ast.SetComp, ast.GeneratorExp)


def check_module(module: Module, report: Report) -> None:
    if not any(module.word_positions(w) for w in ("detach", "item", ".data", "float(", "tolist", "numpy")):
        return
    tree = module.tree
    ctx = _ctx(tree)
    reported: Set[int] = set()
    for call in nodes_of(tree, ast.Call):
        if terminal(call.func) not in ("backward", "manual_backward"):
            continue
        loss = backward_tensor(call)
        stmt = _statement(ctx, call)
        if loss is None or stmt is None:
            continue
        terms = list({(id(t), id(at)): (t, at) for t, at in _terms(module, loss, stmt, 0)}.values())
        if len(terms) < 2:
            continue
        attached = [(t, at) for t, at in terms if not graph_free(tree, t, at)]
        if not attached:
            continue
        others = set().union(*(_read(ctx, t) for t, _ in attached))
        for term, at in terms:
            if not graph_free(tree, term, at):
                continue
            cut = _cut_of_graph(module, term, at, 0, set())
            if cut is None or id(cut) in reported:
                continue
            operand = cut.args[0] if isinstance(cut, ast.Call) and isinstance(cut.func, ast.Name) else (
                cut.func.value if isinstance(cut, ast.Call) else cut.value)
            if _read(ctx, term) & others or _read(ctx, operand) & others:
                continue  # a value correction of a term that keeps its graph (straight-through)
            reported.add(id(cut))
            how = f"`{text(cut)}`" if len(text(cut)) <= 60 else f"`.{terminal(cut.func if isinstance(cut, ast.Call) else cut)}`"
            report(
                CODE,
                cut,
                f"{how} cuts the graph of a value that `{text(term)[:60]}` adds to the loss of `{text(call)[:60]}`; "
                f"the term changes the loss's value and sends no gradient to any parameter.",
                backward=call,
            )


def _statement(ctx, node: ast.AST) -> Optional[ast.stmt]:
    while node is not None and not isinstance(node, ast.stmt):
        node = ctx.parents.get(id(node))
    return node


def _terms(module: Module, e: ast.AST, at: ast.AST, depth: int) -> Iterator[Tuple[ast.AST, ast.AST]]:
    """The terms added into ``e`` (read at statement ``at``): the parts of ``a + b``, the left of ``a - b``
    (what is subtracted is left out), the other factor of a product with a graph-free one, the elements of
    ``sum(...)`` over a comprehension, and a name's one binding that reaches ``at`` when that is such a sum."""
    tree = module.tree
    if depth < _MAX_DEPTH:
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
            yield from _terms(module, e.left, at, depth + 1)
            yield from _terms(module, e.right, at, depth + 1)
            return
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Sub):
            yield from _terms(module, e.left, at, depth + 1)
            return
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Mult, ast.Div)) and _is_sum(module, e.left, at) \
                and graph_free(tree, e.right, at) and not _cuts(e.right):
            yield from _terms(module, e.left, at, depth + 1)
            return
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult) and _is_sum(module, e.right, at) \
                and graph_free(tree, e.left, at) and not _cuts(e.left):
            yield from _terms(module, e.right, at, depth + 1)
            return
        if _builtin_sum(module, e):
            arg = e.args[0]
            if isinstance(arg, ast.Name):
                values = reaching(_ctx(tree), at, arg.id) or []
                if len(values) == 1 and isinstance(values[0][1], _COMPS):
                    yield values[0][1].elt, values[0][0]
                    return
            elif isinstance(arg, _COMPS):
                yield arg.elt, at
                return
        if isinstance(e, ast.IfExp):
            yield from _terms(module, e.body, at, depth + 1)
            yield from _terms(module, e.orelse, at, depth + 1)
            return
        if isinstance(e, ast.Name):
            values = reaching(_ctx(tree), at, e.id) or []
            if values and all(isinstance(v, ast.expr) for _, v in values) and any(_is_sum(module, v, b) for b, v in values):
                for b, v in values:
                    yield from _terms(module, v, b, depth + 1)
                return
    yield e, at


def _is_sum(module: Module, e: ast.AST, at: ast.AST) -> bool:
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)) or _builtin_sum(module, e) or isinstance(e, ast.IfExp):
        return True
    if isinstance(e, ast.Name):
        values = reaching(_ctx(module.tree), at, e.id) or []
        return len(values) == 1 and isinstance(values[0][1], ast.AST) and isinstance(values[0][1], ast.BinOp) \
            and isinstance(values[0][1].op, (ast.Add, ast.Sub))
    return False


def _builtin_sum(module: Module, e: ast.AST) -> bool:
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "sum" and len(e.args) == 1 \
        and not e.keywords and "sum" not in module.functions


def _cuts(e: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in CUTTING_ATTRS for n in subtree(e))


def _read(ctx, e: ast.AST) -> Set[str]:
    """The values an expression reads as written: its names and ``self.x`` fields, not what it calls."""
    called = {id(n.func) for n in subtree(e) if isinstance(n, ast.Call)}
    out = set()
    for n in subtree(e):
        if id(n) in called:
            continue
        if isinstance(n, ast.Name) and n.id not in ctx.torch_names and n.id != "self":
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            out.add(text(n))
    return out


def _cut_of_graph(module: Module, e: ast.AST, at: ast.AST, depth: int, seen: set) -> Optional[ast.AST]:
    """Where the graph-free value ``e`` (read at ``at``) was cut out of a value that carries the graph: a
    ``.detach()``, ``.item()``, ``.data``, ``.tolist()``, ``.numpy()`` or ``float()`` of a value not proved
    graph-free, followed through the assignments that reach it, comprehensions, the containers it was
    appended to, and what the file's functions and models' ``forward`` return."""
    key = (id(e), id(at))
    if depth > _MAX_DEPTH * 2 or key in seen:
        return None
    seen.add(key)
    tree, ctx = module.tree, _ctx(module.tree)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in CUTTING_ATTRS:
        if not graph_free(tree, e.func.value, at):
            return e
        return _cut_of_graph(module, e.func.value, at, depth + 1, seen)
    if isinstance(e, ast.Attribute) and e.attr == "data":
        if not graph_free(tree, e.value, at):
            return e
        return _cut_of_graph(module, e.value, at, depth + 1, seen)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in _TO_NUMBER and e.func.id not in module.functions \
            and len(e.args) == 1:
        if not graph_free(tree, e.args[0], at):
            return e
        return _cut_of_graph(module, e.args[0], at, depth + 1, seen)
    if isinstance(e, ast.Name):
        gen = _comprehension_binding(ctx, e, at)
        if gen is not None:
            return _cut_of_graph(module, gen.iter, at, depth + 1, seen)
        for b, v in reaching(ctx, at, e.id) or []:
            value = v[1] if isinstance(v, tuple) else v
            if isinstance(value, ast.AST):
                found = _cut_of_graph(module, value, b, depth + 1, seen)
                if found is not None:
                    return found
        return None
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Call) and id(e) not in ctx.parents \
            and isinstance(e.slice, ast.Constant) and type(e.slice.value) is int:
        # `a, b = f(...)`: the element of what the function returns
        for r, elt in _returned(module, e.value, at, e.slice.value):
            found = _cut_of_graph(module, elt, r, depth + 1, seen)
            if found is not None:
                return found
        return _cut_of_graph(module, e.value, at, depth + 1, seen)
    if isinstance(e, ast.Call):
        for r, value in _returned(module, e, at, None):
            found = _cut_of_graph(module, value, r, depth + 1, seen)
            if found is not None:
                return found
    for child in ast.iter_child_nodes(e):
        if isinstance(child, ast.comprehension):
            child = child.iter
        if isinstance(child, ast.expr) and not isinstance(child, ast.Constant):
            found = _cut_of_graph(module, child, at, depth + 1, seen)
            if found is not None:
                return found
    return None


def _returned(module: Module, call: ast.Call, at: ast.AST, index: Optional[int]) -> List[Tuple[ast.AST, ast.AST]]:
    """(return statement, value) for what ``call`` hands back (its ``index``-th element): a function or
    method of the file, or the ``forward`` of a model object of one of the file's classes."""
    ctx = _ctx(module.tree)
    fn = _callee(ctx, call.func, at)
    if fn is None:
        fn = module.forward_of(call.func, ctx.scope_of(at))
    if fn is None:
        return []
    out = []
    for r in _own_nodes(fn):
        if isinstance(r, ast.Return) and r.value is not None:
            if index is None:
                out.append((r, r.value))
            elif isinstance(r.value, (ast.Tuple, ast.List)) and index < len(r.value.elts) \
                    and not any(isinstance(x, ast.Starred) for x in r.value.elts):
                out.append((r, r.value.elts[index]))
    return out


__all__ = ["CODE", "FIXTURES", "FIX_SAFETY", "check_module", "target_names"]
