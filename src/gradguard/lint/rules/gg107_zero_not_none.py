"""GG107 zero-not-none: ``zero_grad(set_to_none=False)`` in a scope that builds an optimizer
with momentum or weight decay (silent where the code then adds into ``.grad`` in place,
which needs the zero tensors)."""

from __future__ import annotations

import ast
import re
from typing import Optional

from ...findings import Edit, Fix
from .._ast import keyword_is, terminal, text
from .._edits import Tree
from .._model import Diagnostic, Module, Report
from .._ast import subtree

CODE = "GG107"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg107_zero_not_none_bad.py", "gg107_zero_not_none_good.py")
#: How far ``gradguard lint --fix`` may go with its fix: "safe" (``--fix``) or "unsafe" (``--unsafe-fixes``).
FIX_SAFETY = "safe"

# `p.grad += g`, `p.grad.add_(g)`: in-place writes that would fail on a None gradient.
# Optimizers that move a parameter with a zero gradient whatever their arguments:
# Adam-style first moments keep pushing it (and AdamW decays it).
ALWAYS_MOVES = frozenset({"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "Lion", "LAMB", "Lamb", "FusedAdam", "FusedLAMB", "AdamW8bit", "Adam8bit"})
_INPLACE_GRAD = re.compile(r"\.grad\s*(?:\+=|-=|\*=|/=)|\.grad(?:\.data)?\.(?:add_|sub_|mul_|div_|copy_|addcmul_|addcdiv_|lerp_)\(")


def check_module(module: Module, report: Report) -> None:
    inplace: dict = {}
    for call, scope, cls in module.zero_grads:
        if not keeps_zeros(call):
            continue
        key = id(scope)
        if key not in inplace:
            inplace[key] = _INPLACE_GRAD.search(module.scope_text(scope)) is not None
        if inplace[key]:
            continue  # set_to_none=True would make `p.grad += g` raise
        if _zeros_read_and_no_step(call, scope):
            continue
        for ctor_scope, ctor_cls, ctor in module.ctors:
            if moves_zero_gradients(ctor) and (ctor_scope is scope or ctor_scope is None or (cls is not None and ctor_cls is cls)):
                report(
                    CODE,
                    call,
                    f"`{text(call.func)}(set_to_none=False)` leaves zero-filled gradients, and this scope builds an "
                    f"optimizer with momentum or weight decay.",
                    clear=call,
                )
                break


def _zeros_read_and_no_step(call: ast.Call, scope) -> bool:
    """In a function, the zero tensors the clearing leaves are read by the code after it (``assert
    p.grad.abs().sum() == 0``, a unit test of the clearing) and no ``step()`` is called anywhere in that
    function: no optimizer moves a parameter with those zeros here. (A helper that only clears reads
    nothing after it: its caller's step may follow, and it stays found.)"""
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    end = (call.end_lineno or call.lineno, call.end_col_offset or 0)
    later = [n for n in subtree(scope) if hasattr(n, "lineno") and (n.lineno, n.col_offset) > end]
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
           for n in subtree(scope)):
        return False
    return any(isinstance(n, ast.Attribute) and n.attr == "grad" and isinstance(n.ctx, ast.Load) for n in later)


def keeps_zeros(call: ast.Call) -> bool:
    """``zero_grad(set_to_none=False)`` or ``zero_grad(False)``."""
    if keyword_is(call, "set_to_none", False):
        return True
    return bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value is False


def _nonzero(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value not in (0, 0.0, None, False)
    return True  # a variable: assume the user passes it because it is set


def moves_zero_gradients(ctor: ast.Call) -> bool:
    """Whether the optimizer moves a parameter whose gradient is a zero tensor."""
    name = terminal(ctor.func)
    if name in ALWAYS_MOVES:
        return True
    for k in ctor.keywords:
        if k.arg in ("momentum", "weight_decay") and _nonzero(k.value):
            return True
    if name == "SGD":  # SGD(params, lr, momentum, dampening, weight_decay)
        return any(i < len(ctor.args) and _nonzero(ctor.args[i]) for i in (2, 4))
    return False


# --- the fix ---------------------------------------------------------------------
def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    """GG107 zero-not-none: clear with ``set_to_none=True``.

    Only where nothing in the file reads ``.grad`` (a ``p.grad += g`` or ``buf.add_(p.grad)``
    would then meet None and raise).
    """
    call = d.clear
    if not isinstance(call, ast.Call):
        return None
    if any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in subtree(t.tree)):
        return None  # code in this file (a helper, a hook too) reads .grad and may need the zeros
    value = next((k.value for k in call.keywords if k.arg == "set_to_none"), None)
    if value is None and call.args:
        value = call.args[0]
    if value is None:
        return None
    (line, col), (end_line, end_col) = t.start(value), t.end(value)
    return Fix("Clear with `set_to_none=True`", (Edit(line, col, end_line, end_col, "True"),))
