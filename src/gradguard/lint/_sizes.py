"""How many items each micro-batch of a loop holds, where the file proves it.

A loop's data is usually read at run time (a DataLoader, a file), and then its micro-batch sizes
are not known here. Some programs spell them out: the data cut by a literal list of sizes
(``torch.split(x, [3, 1, 2])``, ``[(x[e - n:e], y[e - n:e]) for e, n in zip(ends, SIZES)]``: a
slice whose extent is the comprehension's size), handed to the training function as an argument.
:func:`windows` then gives the sizes of the micro-batches of each window a step applies, so that
GG105 can say from the numbers, not a name, that the windows mix micro-batches of different sizes.
Every answer is None (not known) unless the source proves it.
"""

from __future__ import annotations

import ast
from typing import Dict, List, Optional, Tuple

from ._ast import nodes_of, subtree, terminal, text
from ._literals import literal_int, truth
from ._ast import child_nodes

Sizes = Tuple[int, ...]
_DEPTH = 16  # each name followed and each layer read counts one


def _enclosing(module, node: ast.AST) -> Optional[ast.AST]:
    """The innermost function around ``node`` (None at module level); one walk of the file, kept."""
    owners = module.__dict__.get("_sizes_owner")
    if owners is None:
        owners = module.__dict__["_sizes_owner"] = {}

        def visit(n: ast.AST, fn: Optional[ast.AST]) -> None:
            for child in child_nodes(n):
                owners[id(child)] = fn
                visit(child, child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else fn)

        visit(module.tree, None)
    return owners.get(id(node))


def _callers(module, fn: ast.AST, cls: Optional[ast.ClassDef]) -> Optional[List[Tuple[ast.Call, int]]]:
    """``(call, offset)`` for every call of ``fn`` in the file: by name, through ``self.``, or, for a
    method of ``cls``, on a name bound only to constructions of ``cls`` (``t = Trainer(...)``;
    ``t.fit(data)``). ``offset`` is 1 where the call does not pass ``self``. None where ``fn`` is
    also used any other way (handed on as a value: its callers are not all known)."""
    name = getattr(fn, "name", None)
    if name is None:
        return None
    out = []
    every = module.__dict__.get("_sizes_calls")
    if every is None:  # one walk of the file, kept: each parameter asked about reads it
        every = module.__dict__["_sizes_calls"] = nodes_of(module.tree, ast.Call)
    for n in every:
        f = n.func
        if cls is None and isinstance(f, ast.Name) and f.id == name:
            out.append((n, 0))
        elif cls is not None and isinstance(f, ast.Attribute) and f.attr == name:
            recv = f.value
            if isinstance(recv, ast.Name) and recv.id in ("self", "cls"):
                out.append((n, 1))
            elif isinstance(recv, ast.Name) and _constructs(module, recv, n, cls):
                out.append((n, 1))
            elif isinstance(recv, ast.Call) and isinstance(recv.func, ast.Name) and recv.func.id == cls.name:
                out.append((n, 1))  # `Runner(model, 2).fit(data)`
            else:
                return None  # `other.fit(...)`: an object this file does not show
    if cls is None and module.scope_facts(None).names.get(name, 0) > len(out):
        return None  # also handed on as a value (a callback): its other callers are not in view
    return out


def _constructs(module, name: ast.Name, at: ast.AST, cls: ast.ClassDef) -> bool:
    """``name`` is bound (in the scope of ``at``) only to constructions of ``cls`` or of a subclass
    of it in the file that does not define the method itself (the base class's loop runs on it)."""
    scope = _enclosing(module, at)
    values = module.scope_facts(scope).bound.get(name.id, [])
    method = getattr(at.func, "attr", None) if isinstance(at, ast.Call) else None
    return bool(values) and all(isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and _derives(module, v.func.id, cls, method)
                                for v in values)


def _derives(module, name: str, cls: ast.ClassDef, method: Optional[str], depth: int = 0) -> bool:
    """Class ``name`` of the file is ``cls`` or derives from it (names of the file's classes) and
    inherits ``method`` from it rather than overriding it."""
    if name == cls.name:
        return True
    sub = module.classes.get(name)
    if sub is None or depth > 4 or (method is not None and any(
            isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == method for s in sub.body)):
        return False
    return any(isinstance(b, ast.Name) and _derives(module, b.id, cls, method, depth + 1) for b in sub.bases)


def _argument(fn: ast.AST, call: ast.Call, offset: int, param: str) -> Optional[ast.expr]:
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args][offset:]
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    if param in params and params.index(param) < len(call.args):
        return call.args[params.index(param)]
    return next((k.value for k in call.keywords if k.arg == param), None)


def _resolve(name: str, scope: Optional[ast.AST], module, cls, depth: int, read) -> Optional[object]:
    """``read(value, scope, cls, depth)`` of what ``name`` holds in ``scope``: its one binding there,
    the arguments every call of the function gives its parameter (all must agree), or the one
    module-level binding. None where any of these is not known."""
    if depth > _DEPTH:
        return None
    if scope is not None:
        values = module.scope_facts(scope).bound.get(name, [])
        if values:
            return read(values[0], scope, module, cls, depth + 1) if len(values) == 1 and values[0] is not None else None
        params = [a.arg for a in scope.args.posonlyargs + scope.args.args] if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
        if name in params:
            method_cls = cls if cls is not None and scope in cls.body else None
            calls = _callers(module, scope, method_cls)
            if not calls:
                return None
            found = set()
            for call, offset in calls:
                arg = _argument(scope, call, offset, name)
                if arg is None:
                    return None
                found.add(read(arg, _enclosing(module, call), module, None if offset == 0 or method_cls is None else method_cls, depth + 1))
            return found.pop() if len(found) == 1 else None
        if isinstance(scope, ast.Lambda):
            return None
    values = _top(module).get(name, [])  # a module-level name (a global read in a function)
    return read(values[0], None, module, cls, depth + 1) if len(values) == 1 and values[0] is not None else None


def _top(module) -> Dict[str, list]:
    from ._literals import top_level

    return top_level(module).bound


def ints(node: ast.expr, scope, module, cls=None, depth: int = 0) -> Optional[Sizes]:
    """A list or tuple of int literals, through names."""
    if isinstance(node, ast.Name):
        return _resolve(node.id, scope, module, cls, depth, ints)
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts and all(isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts):
        return tuple(e.value for e in node.elts)
    return None


def length(node: ast.expr, scope, module, cls=None, depth: int = 0) -> Optional[int]:
    """How many items a sequence holds: a literal list, a comprehension over one, ``range(len(x))``."""
    if depth > _DEPTH:
        return None
    if isinstance(node, ast.Name):
        return _resolve(node.id, scope, module, cls, depth, length)
    if isinstance(node, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in node.elts):
        return len(node.elts)
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1 and not node.generators[0].ifs:
        return length(node.generators[0].iter, scope, module, cls, depth + 1)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and len(node.args) == 1
            and isinstance(node.args[0], ast.Call) and isinstance(node.args[0].func, ast.Name) and node.args[0].func.id == "len"
            and len(node.args[0].args) == 1):
        return length(node.args[0].args[0], scope, module, cls, depth + 1)
    return None


def integer(node: ast.expr, scope, module, cls=None, depth: int = 0) -> Optional[int]:
    """An int literal, through names and the arguments of every call."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        return _resolve(node.id, scope, module, cls, depth, integer)
    if isinstance(node, ast.Attribute) and cls is not None and depth <= _DEPTH:
        # `self.k` set once in `__init__` from what every construction of the class gives
        from types import SimpleNamespace

        from ._literals import attribute_binding

        value = attribute_binding(node, SimpleNamespace(cls=cls, module=module))
        return None if value is None else integer(value, scope, module, None, depth + 1)
    return None


def _linear(node: Optional[ast.expr]) -> Optional[Dict[object, int]]:
    """``node`` as a sum of names and an int (``e - n`` -> {e: 1, n: -1}); None otherwise."""
    if node is None:
        return {}
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return {1: node.value}
    if isinstance(node, ast.Name):
        return {node.id: 1}
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        a, b = _linear(node.left), _linear(node.right)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(node.op, ast.Add) else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return {k: v for k, v in out.items() if v}
    return None


def _extent(part: ast.expr) -> Optional[Dict[object, int]]:
    """How many items a slice ``x[lo:hi]`` holds, as a sum of names (``x[e - n:e]`` -> n)."""
    if not (isinstance(part, ast.Subscript) and isinstance(part.slice, ast.Slice) and part.slice.step is None):
        return None
    if part.slice.upper is None:
        return None
    lo, hi = _linear(part.slice.lower), _linear(part.slice.upper)
    if lo is None or hi is None:
        return None
    out = dict(hi)
    for k, v in lo.items():
        out[k] = out.get(k, 0) - v
    return {k: v for k, v in out.items() if v}


def sizes(node: ast.expr, scope, module, cls=None, depth: int = 0) -> Optional[Sizes]:
    """The number of items of each element of a list of micro-batches, where the file spells it:
    ``torch.split(x, SIZES)`` / ``x.split(SIZES)`` (and a ``zip`` of such), or a comprehension over a
    literal list of sizes whose elements are slices as long as the size."""
    if depth > _DEPTH:
        return None
    if isinstance(node, ast.Name):
        return _resolve(node.id, scope, module, cls, depth, sizes)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple") and len(node.args) == 1:
        return sizes(node.args[0], scope, module, cls, depth + 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "zip" and node.args and not node.keywords:
        parts = {sizes(a, scope, module, cls, depth + 1) for a in node.args}
        return parts.pop() if len(parts) == 1 else None
    if isinstance(node, ast.Call) and terminal(node.func) == "split" and not node.keywords:
        # torch.split(x, [3, 1, 2]) or x.split([3, 1, 2]): pieces of exactly these sizes
        args = node.args[1:] if text(node.func) == "torch.split" else node.args if isinstance(node.func, ast.Attribute) else None
        if args and len(args) == 1:
            return ints(args[0], scope, module, cls, depth + 1)
        return None
    if isinstance(node, ast.ListComp) and len(node.generators) == 1:
        gen = node.generators[0]
        if gen.ifs or gen.is_async:
            return None
        elts = node.elt.elts if isinstance(node.elt, ast.Tuple) else [node.elt]
        extents = {repr(sorted(e.items(), key=str)) if e is not None else None for e in map(_extent, elts)}
        extent = _extent(elts[0])
        if extent is None or len(extents) != 1:
            return None
        names = [k for k in extent if k != 1]
        if len(names) != 1 or extent[names[0]] != 1:
            return None
        size_name, offset = names[0], extent.get(1, 0)
        # the comprehension's variable and the sequence it runs over
        if isinstance(gen.target, ast.Name) and gen.target.id == size_name:
            seq = gen.iter
        elif (isinstance(gen.target, ast.Tuple) and isinstance(gen.iter, ast.Call) and isinstance(gen.iter.func, ast.Name)
              and gen.iter.func.id == "zip" and len(gen.iter.args) == len(gen.target.elts) and not gen.iter.keywords):
            index = next((i for i, t in enumerate(gen.target.elts) if isinstance(t, ast.Name) and t.id == size_name), None)
            if index is None:
                return None
            lengths = {length(a, scope, module, cls, depth + 1) for a in gen.iter.args}
            seq = gen.iter.args[index]
            values = ints(seq, scope, module, cls, depth + 1)
            if values is None or lengths != {len(values)}:
                return None  # zip stops at its shortest sequence: every one must be as long
            return tuple(v + offset for v in values)
        else:
            return None
        values = ints(seq, scope, module, cls, depth + 1)
        return None if values is None else tuple(v + offset for v in values)
    return None


def data_length(node: ast.expr, loop) -> Optional[int]:
    """How many micro-batches a loop's data holds, where the file proves it (its sizes, or its length),
    through the arguments every call of the loop's function gives."""
    found = sizes(node, loop.scope, loop.module, loop.cls)
    return len(found) if found is not None else length(node, loop.scope, loop.module, loop.cls)


def window_int(node: ast.expr, loop) -> Optional[int]:
    """An int the file proves: a literal, a name bound once to one, ``self.k`` from every
    construction, a parameter every call gives the same literal, an entry of a configuration dict
    (``CONFIG["steps"]``, the dict a literal bound once)."""
    value = literal_int(node, loop)
    if value is None and isinstance(node, ast.Subscript):
        return _entry(node, loop)
    return value if value is not None else integer(node, loop.scope, loop.module, loop.cls)


def _entry(node: ast.Subscript, loop) -> Optional[int]:
    """``D["key"]`` where ``D`` is bound once to a dict literal whose ``"key"`` holds a provable int."""
    key = node.slice
    if not (isinstance(node.value, ast.Name) and isinstance(key, ast.Constant) and isinstance(key.value, str)):
        return None
    found = _resolve(node.value.id, loop.scope, loop.module, loop.cls, 0, lambda v, *_: v)
    if not isinstance(found, ast.Dict) or any(k is None for k in found.keys):
        return None
    values = [v for k, v in zip(found.keys, found.values) if isinstance(k, ast.Constant) and k.value == key.value]
    if len(values) != 1 or len([k for k in found.keys if not isinstance(k, ast.Constant)]):
        return None
    return window_int(values[0], loop)


def _indexed(loop, index: str) -> Optional[ast.expr]:
    """The one sequence the loop's body reads at the loop's index (``x, y = data[i]``), by a statement
    of the body itself; None where there is none or more than one."""
    seqs = {}
    for stmt in loop.node.body:
        if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Subscript) and isinstance(stmt.value.slice, ast.Name)
                and stmt.value.slice.id == index):
            seqs[text(stmt.value.value)] = stmt.value.value
    return next(iter(seqs.values())) if len(seqs) == 1 else None


def _unwrap(it: ast.expr) -> ast.expr:
    return it.args[0] if isinstance(it, ast.Call) and terminal(it.func) == "enumerate" and it.args and len(it.args) == 1 and not it.keywords else it


def windows(loop) -> Optional[List[Sizes]]:
    """The micro-batch sizes of each window the loop's steps apply, in order, where the file proves
    the data's sizes, the window size and where each window closes: a loop over slices
    ``data[s:s + K]`` for ``s`` in ``range(0, ..., K)``, or a loop over ``enumerate(data)`` whose
    step's tests (``(i + 1) % K == 0``, ``... or i + 1 == len(data)``, a counter grown by one and
    set back at ``== K``) are decided at every index. A remainder stepped after the loop is left
    out (not proven here)."""
    node, module, cls = loop.node, loop.module, loop.cls
    if not isinstance(node, ast.For) or not loop.steps:
        return None
    k_expr = loop.window_size()
    k = None if k_expr is None else window_int(k_expr, loop)
    if k is None or k < 2:
        return None
    micro = loop._micro_loop()
    if micro is not None and micro is not node:
        # `for s in range(0, n, K): w = data[s:s + K]; for x in w:`: consecutive windows from 0
        it = _unwrap(micro.iter)
        if isinstance(it, ast.Name):
            values = [v for v in _assigned(node, it.id)]
            it = values[0] if len(values) == 1 else None
        if not (isinstance(it, ast.Subscript) and isinstance(it.slice, ast.Slice) and it.slice.lower is not None):
            return None
        outer = node.iter
        if not (isinstance(node.target, ast.Name) and isinstance(it.slice.lower, ast.Name) and it.slice.lower.id == node.target.id
                and isinstance(outer, ast.Call) and isinstance(outer.func, ast.Name) and outer.func.id == "range"
                and len(outer.args) == 3 and isinstance(outer.args[0], ast.Constant) and outer.args[0].value == 0
                and _same_int(outer.args[2], k, loop)):
            return None
        data = sizes(it.value, loop.scope, module, cls)
        if data is None:
            return None
        return [data[s:s + k] for s in range(0, len(data), k) if len(data[s:s + k]) == k]
    it = node.iter
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1
            and not it.keywords and isinstance(node.target, ast.Name)):
        # `for i in range(N): x, y = data[i]`: the first N micro-batches of the data (N configured)
        index, seq = node.target.id, _indexed(loop, node.target.id)
        runs = window_int(it.args[0], loop)
        every = None if seq is None or runs is None else sizes(seq, loop.scope, module, cls)
        if every is None or not 0 < runs <= len(every):
            return None
        data, length = every[:runs], {f"len({text(seq)})": len(every), text(it.args[0]): runs}
    elif (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and len(it.args) == 1
            and not it.keywords and isinstance(node.target, ast.Tuple) and node.target.elts and isinstance(node.target.elts[0], ast.Name)):
        data = sizes(it.args[0], loop.scope, module, cls)
        if data is None:
            return None
        index = node.target.elts[0].id
        length = {f"len({text(it.args[0])})": len(data)}
    else:
        return None
    counters = [name for name in loop.assignments() if loop.window_counter(name)]
    if counters and not _counted_before_reset(loop, counters):
        return None
    if isinstance(k_expr, ast.Name):
        length[k_expr.id] = k  # a parameter every call gives the same literal
    out, current, count = [], [], {c: 0 for c in counters}
    for i, size in enumerate(data):
        current.append(size)
        count = {c: v + 1 for c, v in count.items()}  # grown once per micro-batch, before the step's test
        values = {index: i, **count, **length}
        closes = None
        for step in loop.steps:
            verdicts = [truth(test, values, loop) if taken else _negate(truth(test, values, loop)) for test, taken in _guards(step)]
            if None in verdicts:
                return None
            closes = closes or all(verdicts)
        if closes:
            out.append(tuple(current))
            current, count = [], {c: 0 for c in counters}
    return out


def _guards(step) -> list:
    return [(entry[0], entry[1]) for entry in step.stack if entry[0] != "loop" and isinstance(entry[0], ast.AST) and isinstance(entry[1], bool)]


def _negate(v: Optional[bool]) -> Optional[bool]:
    return None if v is None else not v


def _same_int(node: ast.expr, k: int, loop) -> bool:
    value = literal_int(node, loop)
    if value is None:
        value = integer(node, loop.scope, loop.module, loop.cls)
    return value == k


def _assigned(loop_node: ast.AST, name: str) -> list:
    from ._ast import assignments

    return [v for v in assignments(loop_node).get(name, ()) if isinstance(v, ast.AST)]


def _counted_before_reset(loop, counters: list) -> bool:
    """Each counter starts at 0, grows by one in a statement of the loop's body before the step's
    tests, and is set back to 0 only under a test that guards every step: then it counts the
    micro-batches of the open window, as :func:`windows` simulates it."""
    node = loop.node
    guard_ifs = [n for n in subtree(node) if isinstance(n, ast.If) and all(any(g is n.test for g, _ in _guards(s)) for s in loop.steps)]
    first_test = min((n.lineno for n in guard_ifs), default=None)
    if first_test is None:
        return False
    for name in counters:
        start = [v for v in loop.module.scope_facts(loop.scope).bound.get(name, []) if v is None or not _inside(node, v)]
        if not start or not all(isinstance(v, ast.Constant) and v.value == 0 for v in start):
            return False
        grows = [s for s in node.body if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id == name]
        if len(grows) != 1 or not (isinstance(grows[0].op, ast.Add) and isinstance(grows[0].value, ast.Constant)
                                   and grows[0].value.value == 1 and grows[0].lineno < first_test):
            return False
        for n in subtree(node):
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
                if not (isinstance(n.value, ast.Constant) and n.value.value == 0 and any(_inside(g, n) for g in guard_ifs)):
                    return False
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == name and n is not grows[0]:
                return False
    return True


def _inside(outer: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in subtree(outer))
