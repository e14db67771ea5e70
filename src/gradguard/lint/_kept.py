"""Whether a value a branch test reads keeps its value across the iterations of a loop.

A test that reads only what an iteration of the loop never changes takes the same side on every
iteration: ``if cfg["amp"]:`` at the backward pass and again at the clip is one decision for the whole
loop, not two independent ones per iteration. Decided from the code the iteration may run (the loop
itself and the functions of the file its calls reach), never from names.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterable, List, Optional

from ._ast import parents_of, subtree, text

#: Methods of a mapping or list that change what it holds.
_MUTATORS = frozenset({"update", "pop", "popitem", "setdefault", "clear", "__setitem__", "__delitem__",
                       "append", "extend", "insert", "remove", "sort", "reverse", "__ior__"})
_MAX_DEPTH = 3


def constant_item(sub: ast.AST) -> Optional[tuple]:
    """``(container text, key)`` of ``cfg["amp"]`` / ``self.hp[0]``: a subscript by a constant string or int
    of a name or attribute chain; None for anything else (``x[i]``, ``f()["k"]``)."""
    if not isinstance(sub, ast.Subscript):
        return None
    key = sub.slice
    if not (isinstance(key, ast.Constant) and type(key.value) in (str, int)):
        return None
    box = sub.value
    chain = box
    while isinstance(chain, ast.Attribute):
        chain = chain.value
    if not isinstance(chain, ast.Name):
        return None
    return text(box), key.value


def item_kept(box: str, key, region: Iterable[ast.AST],
              callee: Optional[Callable[[ast.Call], Optional[ast.AST]]] = None, depth: int = 0) -> bool:
    """Nothing in ``region`` (the nodes an iteration may run) may change ``box[key]``: no item of ``box``
    is stored or deleted, no item of any container is stored under the same key (an alias of ``box``),
    no method that changes a container is called on ``box``, ``box`` is not bound to another name, and
    where ``box`` itself is handed to a call, the call runs a function of the file (``callee``) whose
    parameter receiving it is kept the same way (any other call may change it: not kept)."""
    if depth > _MAX_DEPTH:
        return False
    for root in region:
        for n in subtree(root):
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, (ast.Store, ast.Del)):
                if text(n.value) == box:
                    return False
                if isinstance(n.slice, ast.Constant) and n.slice.value == key:
                    return False
            elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and n.value is not None and text(n.value) == box:
                return False  # an alias: its changes are not followed
            elif isinstance(n, ast.Call):
                func = n.func
                if isinstance(func, ast.Attribute) and func.attr in _MUTATORS and text(func.value) == box:
                    return False
                if isinstance(func, ast.Name) and func.id in ("setattr", "exec", "eval", "vars", "globals"):
                    return False
                handed = [i for i, a in enumerate(n.args) if text(a) == box]
                named = [k.arg for k in n.keywords if text(k.value) == box]
                if not handed and not named:
                    continue
                fn = callee(n) if callee is not None else None
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or any(a is None for a in named):
                    return False
                if any(isinstance(a, ast.Starred) for a in n.args):
                    return False
                params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
                if params and params[0] == "self" and isinstance(func, ast.Attribute):
                    params = params[1:]
                names: List[str] = [params[i] for i in handed if i < len(params)] + list(named)
                if len(names) != len(handed) + len(named):
                    return False  # handed to *args: not followed
                if not all(item_kept(p, key, [fn], callee, depth + 1) for p in names):
                    return False
    return True


def counted_before(name: str, node: ast.AST, root: ast.AST) -> bool:
    """``name`` holds a count completed before the innermost loop (inside ``root``) that runs ``node``
    begins, and unchanged until that loop ends: in the block holding that loop, a statement before it
    binds ``name`` to a constant (``n = 0``), and every other binding of ``name`` in ``root`` lies in the
    statements between that one and the loop (``for x in group: n += 1``). Each run of the loop reads one
    final count (the size of what was counted), the same for all its iterations: no running counter.
    False where ``node`` is in no loop inside ``root``, or ``name`` is bound anywhere else in ``root``."""
    parent = parents_of(root)  # read only
    loop, cur = None, node
    while id(cur) in parent:
        up = parent[id(cur)]
        if isinstance(up, (ast.For, ast.AsyncFor, ast.While)) and cur not in getattr(up, "orelse", ()) \
                and cur is not getattr(up, "iter", None) and cur is not getattr(up, "test", None):
            loop = up
            break
        cur = up
    if loop is None or loop is root or id(loop) not in parent:
        return False
    holder = parent[id(loop)]
    block = next((b for b in (getattr(holder, f, None) for f in ("body", "orelse", "finalbody"))
                  if isinstance(b, list) and any(s is loop for s in b)), None)
    if block is None:
        return False
    at = next(i for i, s in enumerate(block) if s is loop)
    start = next((i for i in range(at - 1, -1, -1) if isinstance(block[i], ast.Assign)
                  and len(block[i].targets) == 1 and isinstance(block[i].targets[0], ast.Name)
                  and block[i].targets[0].id == name and isinstance(block[i].value, ast.Constant)), None)
    if start is None:
        return False
    allowed = {id(n) for s in block[start:at] for n in subtree(s)}
    for n in subtree(root):
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Store, ast.Del)) and id(n) not in allowed:
            return False
        if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
            return False
    return True
