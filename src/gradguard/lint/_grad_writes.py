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
    return False


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
