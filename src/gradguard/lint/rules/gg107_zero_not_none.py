"""GG107 zero-not-none: ``zero_grad(set_to_none=False)`` in a scope that builds an optimizer
with momentum or weight decay (silent where the code then adds into ``.grad`` in place,
which needs the zero tensors)."""

from __future__ import annotations

import re

from .._events import text
from .._model import Module, Report

CODE = "GG107"

# `p.grad += g`, `p.grad.add_(g)`: in-place writes that would fail on a None gradient.
_INPLACE_GRAD = re.compile(r"\.grad\s*(?:\+=|-=|\*=|/=)|\.grad(?:\.data)?\.(?:add_|sub_|mul_|div_|copy_|addcmul_|addcdiv_|lerp_)\(")


def check_module(module: Module, report: Report) -> None:
    inplace: dict = {}
    for call, scope, cls in module.zero_grads:
        key = id(scope)
        if key not in inplace:
            inplace[key] = _INPLACE_GRAD.search(module.scope_text(scope)) is not None
        if inplace[key]:
            continue  # set_to_none=True would make `p.grad += g` raise
        for ctor_scope, ctor_cls, moves in module.ctors:
            if moves and (ctor_scope is scope or ctor_scope is None or (cls is not None and ctor_cls is cls)):
                report(
                    CODE,
                    call,
                    f"`{text(call.func)}(set_to_none=False)` leaves zero-filled gradients, and this scope builds an "
                    f"optimizer with momentum or weight decay.",
                    clear=call,
                )
                break
