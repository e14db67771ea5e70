"""Generic helpers on Python's ``ast``: names, assignments, arguments, and line sets.

Nothing here knows about gradients; the program model (:mod:`._model`), its builder
(:mod:`._builder`) and the rules use these to read code.
"""

from __future__ import annotations

import ast
from bisect import bisect_left
from typing import Dict, Iterator, List, Optional, Tuple

def terminal(node: ast.AST) -> str:
    """The last name of an expression: ``self.opt[0]`` -> ``"opt"``, ``f().g`` -> ``"g"``.

    >>> terminal(ast.parse("self.optimizer.step", mode="eval").body)
    'step'
    """
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return ""


def called(node: ast.AST) -> str:
    """How a message names a step or a backward pass: ``f()`` for a call, the statement itself for a
    step written by hand (``w -= lr * w.grad``), which has no function."""
    if isinstance(node, ast.Call):
        return text(node.func) + "()"
    return text(node)


def text(node: Optional[ast.AST]) -> str:
    """Source text of a small expression (for matching receivers), ``""`` for None."""
    if node is None:
        return ""
    # kept on the node: the rules ask for the same receivers' text at every call they follow, and
    # unparsing was a tenth of the lint time (no rule changes a parsed node, so it cannot go stale)
    cached = node.__dict__.get("_gg_text")
    if cached is None:
        if isinstance(node, ast.Name):  # what ast.unparse writes for a name and `a.b.c`, without its set-up
            cached = node.id
        elif isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
            cached = text(node.value) + "." + node.attr
        else:
            try:
                cached = ast.unparse(node)
            except Exception:  # pragma: no cover - unparse handles every parsed node
                cached = ""
        node.__dict__["_gg_text"] = cached
    return cached


#: Context managers and decorators that turn autograd off.
NO_GRAD_CONTEXTS = frozenset({"no_grad", "inference_mode"})


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def body_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk over a loop body, without entering nested function or class bodies."""
    # kept on the node: the model and several rules walk the same loop and helper bodies again and
    # again (it was a fifth of the lint time); no rule changes a parsed node
    nodes = node.__dict__.get("_gg_body_nodes")
    if nodes is None:
        nodes = node.__dict__["_gg_body_nodes"] = _body_nodes(node)
    return iter(nodes)


#: Fields that hold a name, a number or a flag in every node type that has them (``Name.id``,
#: ``Attribute.attr``, ``alias.name``, ``ImportFrom.level``, ...), never a node: the walks below skip
#: them, and give the same nodes in the same order as ``ast.iter_child_nodes``/``ast.walk``.
_PLAIN_FIELDS = frozenset({"id", "attr", "name", "asname", "arg", "kind", "type_comment", "module", "level",
                           "conversion", "is_async"})
_NODE_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _node_fields(t: type) -> Tuple[str, ...]:
    """``t._fields`` less :data:`_PLAIN_FIELDS`, kept per node type."""
    fields = _NODE_FIELDS.get(t)
    if fields is None:
        fields = _NODE_FIELDS[t] = tuple(f for f in t._fields if f not in _PLAIN_FIELDS)
    return fields


for _t in vars(ast).values():
    if isinstance(_t, type) and issubclass(_t, ast.AST):
        _node_fields(_t)
del _t


def _body_nodes(node: ast.AST) -> List[ast.AST]:
    pending = list(node.body) + list(getattr(node, "orelse", []) if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) else [])
    out = []
    AST = ast.AST
    fields_of = _NODE_FIELDS.get
    while pending:
        n = pending.pop()
        out.append(n)
        fields = fields_of(type(n))
        if fields is None:
            fields = _node_fields(type(n))
        for field in fields:  # child_nodes(n), inlined: the hottest walk
            value = getattr(n, field, None)
            if isinstance(value, list):
                pending += [c for c in value if isinstance(c, AST) and not isinstance(c, _NESTED)]
            elif isinstance(value, AST) and not isinstance(value, _NESTED):
                pending.append(value)
    return out


def target_names(t: ast.AST) -> List[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in target_names(e)]
    if isinstance(t, ast.Starred):
        return target_names(t.value)
    return []


def assignments(loop_node: ast.AST) -> Dict[str, list]:
    """name -> the values assigned to it in the loop body (``("aug", op)`` for ``x /= k``, ``f()[i]``
    for the i-th name of ``a, b = f()``). Kept on the node, as :func:`body_nodes`: the rules ask for the
    same loops' and helpers' assignments again and again; callers read it and never change it."""
    out = loop_node.__dict__.get("_gg_assignments")
    if out is None:
        out = loop_node.__dict__["_gg_assignments"] = _assignments(loop_node)
    return out


def _assignments(loop_node: ast.AST) -> Dict[str, list]:
    out: Dict[str, list] = {}
    for n in body_nodes(loop_node):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if _unpacks_call(t, n.value):
                    # `loss, result = forward()`: each name gets its element, `forward()[i]`
                    for i, e in enumerate(t.elts):
                        element = ast.copy_location(ast.Subscript(n.value, ast.Constant(i), ast.Load()), n.value)
                        out.setdefault(e.id, []).append(element)
                    continue
                for name in target_names(t):
                    out.setdefault(name, []).append(n.value)
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            for name in target_names(n.target):
                out.setdefault(name, []).append(n.value)
        elif isinstance(n, ast.AugAssign):
            for name in target_names(n.target):
                out.setdefault(name, []).append(("aug", n.op, n))
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.NamedExpr)):
            targets = [n.target] if isinstance(n, (ast.For, ast.AsyncFor, ast.NamedExpr)) else [i.optional_vars for i in n.items if i.optional_vars]
            for t in targets:
                for name in target_names(t):
                    out.setdefault(name, []).append(None)  # unknown value
    return out


def _unpacks_call(target: ast.AST, value: ast.expr) -> bool:
    """``a, b = f(...)``: names (no starred one) unpacked from what a call returns."""
    return (
        isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, ast.Call)
        and all(isinstance(e, ast.Name) for e in target.elts)
    )


def bound_values(stmt: ast.AST) -> Iterator[Tuple[str, Optional[ast.expr]]]:
    """``(name, value)`` for each name a plain assignment binds: ``k = 2`` and ``a = k = 2``
    give the value, ``k, coeff = 2, 0.1`` pairs the names with the elements; an unpacking
    that cannot be paired (``k, n = load()``, a starred target) gives ``(name, None)``, a value
    not known here.

    >>> [(n, ast.unparse(v) if v else v) for n, v in bound_values(ast.parse("k, (a, b) = 2, f()").body[0])]
    [('k', '2'), ('a', None), ('b', None)]
    """
    if not isinstance(stmt, ast.Assign):
        return
    for target in stmt.targets:
        yield from _pair(target, stmt.value)


def _pair(target: ast.AST, value: Optional[ast.expr]) -> Iterator[Tuple[str, Optional[ast.expr]]]:
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, (ast.Tuple, ast.List)):
        elts = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
        if elts is not None and len(elts) == len(target.elts) and not any(
            isinstance(e, ast.Starred) for e in list(elts) + list(target.elts)
        ):
            for t, v in zip(target.elts, elts):
                yield from _pair(t, v)
        else:
            for name in target_names(target):
                yield name, None


def bind_arguments(fn: ast.AST, call: Optional[ast.Call]) -> Dict[str, list]:
    """``param -> [argument]`` of a call to ``fn`` (``self`` skipped for a method called as ``self.m(...)``)."""
    if call is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return {}
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
        params = params[1:]
    out: Dict[str, list] = {}
    for name, arg in zip(params, call.args):
        if not isinstance(arg, ast.Starred):
            out[name] = [arg]
    for k in call.keywords:
        if k.arg is not None:
            out[k.arg] = [k.value]
    return out


def returns_of(fn: ast.AST) -> List[ast.expr]:
    """The values ``fn`` returns (nested functions left out)."""
    return [n.value for n in body_nodes(fn) if isinstance(n, ast.Return) and n.value is not None]


def methods_of(cls: ast.ClassDef) -> Dict[str, ast.AST]:
    return {s.name: s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}


def local_defs(fn: ast.AST) -> Dict[str, ast.AST]:
    """The functions defined in ``fn``'s body (in loops and branches too, not in nested defs): its closures."""
    out: Dict[str, ast.AST] = {}
    pending = list(fn.body)
    while pending:
        stmt = pending.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(stmt.name, stmt)
            continue
        if isinstance(stmt, ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody"):
            pending.extend(getattr(stmt, field, None) or ())
        for h in getattr(stmt, "handlers", None) or ():
            pending.extend(h.body)
    return out


def no_grad_function(fn: ast.AST) -> bool:
    return any(terminal(d) in NO_GRAD_CONTEXTS for d in getattr(fn, "decorator_list", ()))


def no_grad_with(stmt: ast.AST) -> bool:
    """``with torch.no_grad():`` / ``inference_mode()`` / ``set_grad_enabled(False)``."""
    for item in stmt.items:
        expr = item.context_expr
        name = terminal(expr)
        if name in NO_GRAD_CONTEXTS:
            return True
        if name == "set_grad_enabled" and isinstance(expr, ast.Call) and expr.args:
            arg = expr.args[0]
            if isinstance(arg, ast.Constant) and arg.value is False:
                return True
    return False


def keyword_is(call: ast.Call, name: str, value) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is value for k in call.keywords)


def parse_expr(source: str) -> Optional[ast.expr]:
    try:
        return ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None


def overlaps(lines: List[int], node: ast.AST) -> bool:
    lo = getattr(node, "lineno", None)
    if lo is None:
        return True
    return any_between(lines, lo, getattr(node, "end_lineno", None) or lo)


def any_between(lines: List[int], lo: int, hi: int) -> bool:
    """Whether one of the sorted ``lines`` lies in ``lo..hi``."""
    i = bisect_left(lines, lo)
    return i < len(lines) and lines[i] <= hi


def child_nodes(node: ast.AST) -> List[ast.AST]:
    """``list(ast.iter_child_nodes(node))``, read from the node's fields directly (about twice as fast)."""
    out = []
    fields = _NODE_FIELDS.get(type(node))
    if fields is None:
        fields = _node_fields(type(node))
    for field in fields:
        value = getattr(node, field, None)
        if isinstance(value, list):
            out += [item for item in value if isinstance(item, ast.AST)]
        elif isinstance(value, ast.AST):
            out.append(value)
    return out


def subtree(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk(node)``: the same nodes in the same order (breadth first), read from each node's
    fields directly rather than through ``iter_child_nodes`` (about twice as fast).

    A module, function or class is walked once and its nodes kept on it (:func:`every_node`): the
    model and the rules walk the same file and the same functions again and again (no rule changes
    a parsed node, so the list cannot go stale)."""
    if type(node) in _KEPT_WALKS:
        return iter(every_node(node))
    return _subtree(node)


#: loops and ``with`` blocks too: the model and a dozen rules walk each training loop again (its
#: builder, its window, GG104's branches, GG201's totals), and a loop inside a loop is walked with both
_KEPT_WALKS = frozenset({ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                         ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith})


def every_node(node: ast.AST) -> List[ast.AST]:
    """``list(ast.walk(node))``, kept on ``node`` (shared with :func:`nodes_of`); never changed by callers."""
    cache = node.__dict__.get("_gg_nodes_of")
    if cache is None:
        cache = node.__dict__["_gg_nodes_of"] = {}
    every = cache.get(None)
    if every is None:
        every = cache[None] = _walk_all(node)
    return every


def _walk_all(node: ast.AST) -> List[ast.AST]:
    """``list(_subtree(node))``, without a generator's cost per node."""
    pending = [node]
    append = pending.append
    AST = ast.AST
    fields_of = _NODE_FIELDS.get
    for n in pending:  # the list grows behind the loop: a queue that is never popped
        fields = fields_of(type(n))
        if fields is None:
            fields = _node_fields(type(n))
        for field in fields:
            value = getattr(n, field, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, AST):
                        append(item)
            elif isinstance(value, AST):
                append(value)
    return pending


def parents_of(root: ast.AST) -> Dict[int, ast.AST]:
    """``{id(child): parent}`` for every node under ``root`` (``root`` itself has none), kept on ``root``:
    GG106, GG201 and the graph reading each asked it of the same module or function again (a walk of the
    whole tree per question). Callers read it and never change it."""
    found = root.__dict__.get("_gg_parents")
    if found is None:
        found = root.__dict__["_gg_parents"] = {}
        AST = ast.AST
        fields_of = _NODE_FIELDS.get
        for n in subtree(root):  # {id(c): n for n in subtree(root) for c in child_nodes(n)}, inlined
            fields = fields_of(type(n))
            if fields is None:
                fields = _node_fields(type(n))
            for field in fields:
                value = getattr(n, field, None)
                if type(value) is list:
                    for item in value:
                        if isinstance(item, AST):
                            found[id(item)] = n
                elif isinstance(value, AST):
                    found[id(value)] = n
    return found


def _subtree(node: ast.AST) -> Iterator[ast.AST]:
    pending = [node]
    fields_of = _NODE_FIELDS.get
    for n in pending:  # the list grows behind the loop: a queue that is never popped
        fields = fields_of(type(n))
        if fields is None:
            fields = _node_fields(type(n))
        for field in fields:
            value = getattr(n, field, None)
            if isinstance(value, list):
                pending += [item for item in value if isinstance(item, ast.AST)]
            elif isinstance(value, ast.AST):
                pending.append(value)
        yield n


def nodes_of(node: ast.AST, types) -> List[ast.AST]:
    """The nodes of ``ast.walk(node)`` that are instances of ``types``, in its order.

    Kept on ``node`` per ``types``, with the walk itself: the rules ask the whole module (and large
    functions) for its assignments, calls or functions again and again, and a walk in Python costs
    about half a parse (no rule changes a parsed node, so the lists cannot go stale).
    """
    cache = node.__dict__.get("_gg_nodes_of")
    if cache is None:
        cache = node.__dict__["_gg_nodes_of"] = {}
    found = cache.get(types)
    if found is None:
        # statements (and their handlers and cases) are never inside expressions: for those types, only
        # the statements are walked
        whole = ast.stmt if all(issubclass(t, _BLOCKS) for t in (types if isinstance(types, tuple) else (types,))) else None
        every = every_node(node) if whole is None else cache.get(whole)
        if every is None:
            every = cache[whole] = _statements(node)
        found = cache[types] = [n for n in every if isinstance(n, types)]
    return found


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case, ast.mod)


def _statements(node: ast.AST) -> List[ast.AST]:
    """``subtree(node)`` without entering expressions: ``node``, every statement, exception handler and
    match case, in ``ast.walk``'s order (a breadth-first order restricted to the nodes whose ancestors
    are all kept is the same order)."""
    pending = [node]
    fields_of = _NODE_FIELDS.get
    for n in pending:
        fields = fields_of(type(n))
        if fields is None:
            fields = _node_fields(type(n))
        for field in fields:
            value = getattr(n, field, None)
            if isinstance(value, list):
                pending += [item for item in value if isinstance(item, _BLOCKS)]
            elif isinstance(value, _BLOCKS):
                pending.append(value)
    return pending


def walk_lines(node: ast.AST, lines: List[int]) -> Iterator[ast.AST]:
    """``ast.walk`` that enters only the nodes whose lines include one of ``lines``."""
    pending = [node]
    while pending:
        n = pending.pop()
        yield n
        for c in child_nodes(n):  # overlaps(lines, c), inlined
            lo = getattr(c, "lineno", None)
            if lo is None:
                pending.append(c)
                continue
            i = bisect_left(lines, lo)
            if i < len(lines) and lines[i] <= (getattr(c, "end_lineno", None) or lo):
                pending.append(c)


def find_all(source: str, words) -> List[int]:
    hits = []
    for word in words:
        pos = source.find(word)
        while pos != -1:
            hits.append(pos)
            pos = source.find(word, pos + len(word))
    return hits


def lines_of(source: str, positions) -> List[int]:
    """The (sorted, distinct) line numbers of character positions, in one pass."""
    out, line, last = [], 1, 0
    for pos in sorted(positions):
        line += source.count("\n", last, pos)
        last = pos
        if not out or out[-1] != line:
            out.append(line)
    return out


def self_ref(value, name: str) -> bool:
    """Whether ``value`` mentions the name ``name`` (``total + x`` for ``total``)."""
    return isinstance(value, ast.AST) and any(isinstance(n, ast.Name) and n.id == name for n in subtree(value))


# Calls whose result is a Python number whatever their argument: the builtins, and the tensor methods
# that read one out (``loss.item()``, ``t.tolist()``); ``t.float()`` (a method) stays a tensor.
_NUMBER_BUILTINS = frozenset({"float", "int", "len", "round", "bool"})
_NUMBER_METHODS = frozenset({"item", "tolist"})


def python_number(expr, assigns: Dict[str, list], depth: int = 0) -> bool:
    """``expr`` is a plain Python number, not a tensor: a numeric literal, ``x.item()``, ``float(x)``,
    ``len(x)``, arithmetic on such values (with values from outside ``assigns``: a step count, a
    hyperparameter), or a name every binding of which in ``assigns`` (``tr_loss += loss.item()``) is one.
    A number carries no autograd graph, so it can never be what a backward pass differentiates.
    False where not proven (a name with no binding in ``assigns``, a call of anything else)."""
    if depth > 8:
        return False
    if isinstance(expr, tuple):  # ("aug", op, node): `total += value`
        return python_number(expr[2].value, assigns, depth + 1)
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool) or expr.value is None
    if isinstance(expr, ast.Call):
        func = expr.func
        return (isinstance(func, ast.Name) and func.id in _NUMBER_BUILTINS) or (
            isinstance(func, ast.Attribute) and func.attr in _NUMBER_METHODS)
    if isinstance(expr, ast.UnaryOp):
        return python_number(expr.operand, assigns, depth + 1)
    if isinstance(expr, ast.BinOp):
        sides = (expr.left, expr.right)
        proven = [python_number(s, assigns, depth + 1) for s in sides]
        # one side proven a number, the other a number or a value bound outside (`tr_loss / (step + 1)`)
        return any(proven) and all(p or _outside(s, assigns) for p, s in zip(proven, sides))
    if isinstance(expr, ast.Name):
        values = assigns.get(expr.id)
        if not values:
            return False
        inner = {**assigns, expr.id: []}
        return all(v is not None and python_number(v, inner, depth + 1) for v in values)
    return False


def _outside(expr: ast.AST, assigns: Dict[str, list]) -> bool:
    """Built only from constants and names with no binding in ``assigns`` (``step + 1``, ``args.k``)."""
    return all(not (isinstance(n, ast.Name) and n.id in assigns) and not isinstance(n, ast.Call) for n in subtree(expr))
