"""GG107 zero-not-none: clear with ``set_to_none=True``.

Only where nothing in the function reads ``.grad`` (a ``p.grad += g`` or ``buf.add_(p.grad)``
would then meet None and raise).
"""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Edit, Fix
from .._model import Diagnostic
from ._tree import Tree


def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    call = d.clear
    if not isinstance(call, ast.Call):
        return None
    scope = t.function_of(call) or t.tree
    if any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(scope)):
        return None
    value = next((k.value for k in call.keywords if k.arg == "set_to_none"), None)
    if value is None and call.args:
        value = call.args[0]
    if value is None:
        return None
    (line, col), (end_line, end_col) = t.start(value), t.end(value)
    return Fix("Clear with `set_to_none=True`", (Edit(line, col, end_line, end_col, "True"),))
