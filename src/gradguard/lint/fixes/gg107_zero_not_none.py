"""GG107 zero-not-none: clear with ``set_to_none=True``.

Only where nothing in the function reads ``.grad`` (a ``p.grad += g`` or ``buf.add_(p.grad)``
would then meet None and raise).
"""

from __future__ import annotations

import ast
from typing import Optional

from ...findings import Edit, Finding, Fix
from ._tree import Tree, call_attr


def fix(t: Tree, finding: Finding) -> Optional[Fix]:
    stmt = t.statement_at(finding.line, lambda s: isinstance(s, ast.Expr) and call_attr(s.value) == "zero_grad")
    if stmt is None:
        return None
    call = stmt.value
    scope = t.scope_of(stmt) or t.tree
    while t.scope_of(scope) is not None and not isinstance(scope, ast.FunctionDef):
        scope = t.scope_of(scope)
    if any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(scope)):
        return None
    value = next((k.value for k in call.keywords if k.arg == "set_to_none"), None)
    if value is None and call.args:
        value = call.args[0]
    if value is None:
        return None
    (line, col), (end_line, end_col) = t.start(value), t.end(value)
    return Fix("Clear with `set_to_none=True`", (Edit(line, col, end_line, end_col, "True"),))
