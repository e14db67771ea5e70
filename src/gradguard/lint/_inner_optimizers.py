"""An optimizer class of the file that steps an optimizer of its own which its ``zero_grad`` never clears.

KempnerForge's Muon sends its non-matrix parameters to an inner ``AdamW`` built in ``__init__``, steps it in
its own ``step()``, and registers only the other half with ``super().__init__``: the ``zero_grad`` it inherits
walks its own ``param_groups``, so the inner optimizer's gradients add up over every step. Decided from the
class's code alone: what ``super().__init__`` registers, what ``__init__`` builds, what ``step`` steps.
"""

from __future__ import annotations

import ast
from typing import Optional, Tuple

from ._ast import terminal, text
from ._events import optimizer_constructor
from ._literals import attribute_binding, binding
from ._model import Loop
from ._ast import subtree


def _is_self_attr(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def uncleared_inner(loop: Loop, target: str) -> Optional[Tuple[str, ast.ClassDef, ast.Call]]:
    """``(attribute, class, its constructor)`` of an inner optimizer that ``target``'s ``step()`` steps and its
    ``zero_grad()`` leaves alone: ``target`` is bound once to ``C(...)`` of a class the file defines at its top
    level, a subclass of ``Optimizer`` with no ``zero_grad`` of its own, whose ``__init__`` hands
    ``super().__init__`` one set of parameters and builds ``self.X = SomeOptimizer(other, ...)`` over another
    name, and whose ``step`` calls ``self.X.step()``; nothing in the file calls ``X.zero_grad()``. None otherwise."""
    node = ast.parse(target, mode="eval").body if target.replace(".", "").replace("_", "").isalnum() else None
    if isinstance(node, ast.Name):
        call = binding(node.id, loop)
    elif isinstance(node, ast.Attribute):
        call = attribute_binding(node, loop)
    else:
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    classes = [s for s in loop.module.tree.body if isinstance(s, ast.ClassDef) and s.name == call.func.id]
    if len(classes) != 1 or not any(terminal(b) == "Optimizer" for b in classes[0].bases):
        return None
    cls = classes[0]
    methods = {f.name: f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "zero_grad" in methods or "step" not in methods or "__init__" not in methods:
        return None
    init = methods["__init__"]
    supers = [
        c for c in subtree(init)
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "__init__"
        and isinstance(c.func.value, ast.Call) and terminal(c.func.value.func) == "super"
    ]
    if len(supers) != 1 or not supers[0].args or isinstance(supers[0].args[0], ast.Starred):
        return None
    registered = text(supers[0].args[0])
    inner = {}
    for n in subtree(init):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and _is_self_attr(n.targets[0]):
            built = optimizer_constructor(n.value)
            if built is not None and built.args and text(built.args[0]) != registered:
                inner[_is_self_attr(n.targets[0])] = built
    if not inner:
        return None
    stepped = [
        _is_self_attr(c.func.value) for c in subtree(methods["step"])
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "step" and _is_self_attr(c.func.value) in inner
    ]
    cleared = {
        c.func.value.attr for c in subtree(loop.module.tree)
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "zero_grad"
        and isinstance(c.func.value, ast.Attribute)
    }
    for attr in stepped:
        if attr not in cleared:
            return attr, cls, inner[attr]
    return None
