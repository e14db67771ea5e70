"""Text and tree readings of where a class writes ``.grad`` and how it uses its attributes.

Shared by GG101 (a method that steps an optimizer its object holds) and the per-update view
(:mod:`._per_call`), which both ask whether a class writes gradients and whether ``self.X`` is
used in place; kept here so that neither imports the other (the rules import the builder, which
imports the per-update view).
"""

from __future__ import annotations

import ast
import re

from ._ast import terminal
from ._ast import subtree

#: A write to ``.grad`` in source text: an assignment, an in-place operator or method, a ``del``,
#: or a foreach zeroing/scaling.
GRAD_WRITE = re.compile(
    r"\.grad[ \t]*(?:\.data[ \t]*)?(?:=(?!=)|[-+*/]=|\.[ \t]*(?:zero_|fill_|mul_|detach_|copy_|set_|requires_grad_))"
    r"|\bdel\s+[^\n]*\.grad\b|_foreach_zero_|_foreach_mul_"
)


def used_in_place(cls: ast.ClassDef, node: ast.Attribute) -> bool:
    """``self.X`` read as ``self.X.something`` (``.step()``, ``.state_dict()``, ``.param_groups``),
    called (a module's forward), or copied (``copy.deepcopy(self.actor)``: a new object)."""
    for n in subtree(cls):
        if isinstance(n, ast.Attribute) and n.value is node:
            return True
        if isinstance(n, ast.Call) and (n.func is node or (node in n.args and terminal(n.func) == "deepcopy")):
            return True
        if isinstance(n, ast.Call) and any(a is node for a in n.args) and _read_by_own_method(cls, n, node):
            return True
        if isinstance(n, (ast.For, ast.AsyncFor)) and _iterated_in_place(n, node):
            return True
    return False


def _only_read_in_place(body, name: str) -> bool:
    """In ``body``, ``name`` is only read as ``name.something`` (never handed on, rebound or
    aliased), and no code there names ``.grad`` or calls ``zero_grad``."""
    in_place, names = set(), []
    for root in body:
        for n in ast.walk(root):
            if isinstance(n, ast.Attribute) and n.attr in ("grad", "zero_grad"):
                return False
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name:
                in_place.add(id(n.value))
            if isinstance(n, ast.Name) and n.id == name:
                names.append(n)
    return all(id(n) in in_place for n in names)


def _iterated_in_place(loop, node: ast.Attribute) -> bool:
    """``for source, target in [(self.actor, self.actor_target), ...]:`` (or ``for m in [self.actor]:``)
    whose body only reads the loop's name for ``self.X`` in place (``source.parameters()``)."""
    if not isinstance(loop.iter, (ast.List, ast.Tuple)) or loop.orelse:
        return False
    for item in loop.iter.elts:
        if item is node and isinstance(loop.target, ast.Name):
            return _only_read_in_place(loop.body, loop.target.id)
        if isinstance(item, (ast.Tuple, ast.List)) and isinstance(loop.target, (ast.Tuple, ast.List)):
            for j, e in enumerate(item.elts):
                if e is node and j < len(loop.target.elts) and len(item.elts) == len(loop.target.elts):
                    target = loop.target.elts[j]
                    return isinstance(target, ast.Name) and _only_read_in_place(loop.body, target.id)
    return False


def _read_by_own_method(cls: ast.ClassDef, call: ast.Call, node: ast.Attribute) -> bool:
    """``self._soft_update(self.actor, self.actor_target)``: handed to a method of the class itself
    (through ``self.`` or the class's name) whose parameter is only read in place there
    (``source.parameters()``), never handed on or bound to another name, in a body that neither
    names ``.grad`` nor calls ``zero_grad``: the object goes nowhere that could clear it."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", cls.name)):
        return False
    method = next((f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == func.attr), None)
    at = next(i for i, a in enumerate(call.args) if a is node)
    if method is None or any(isinstance(a, ast.Starred) for a in call.args[: at + 1]):
        return False
    params = [a.arg for a in method.args.posonlyargs + method.args.args]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in method.decorator_list)
    if not static and func.value.id == "self":
        params = params[1:]
    elif not static:
        return False
    if at >= len(params):
        return False
    return _only_read_in_place(method.body, params[at])


def class_span(text: str, at: int):
    """(name, start, end) of the innermost class whose body holds offset ``at`` of ``text``."""
    line_start = text.rfind("\n", 0, at) + 1
    indent = len(text[line_start:at]) - len(text[line_start:at].lstrip())
    for m in reversed(list(re.finditer(r"^([ \t]*)class[ \t]+(\w+)", text[:line_start], re.M))):
        if len(m.group(1)) < indent:
            # the class ends at the first code line indented no deeper than its header
            after = re.compile(r"^[ \t]{0,%d}(?=[^\s#])" % len(m.group(1)), re.M).search(text, text.find("\n", m.end()) + 1)
            end = after.start() if after else len(text)
            return (m.group(2), m.start(), end) if end > at else None
        if len(m.group(1)) == 0:
            break
    return None
