"""GG301 ignored-num-items-in-batch: a ``compute_loss`` override of an HF ``Trainer``
subclass that accepts ``num_items_in_batch`` and never uses it."""

from __future__ import annotations

import ast

from .._model import Module, Report
from .._ast import subtree

CODE = "GG301"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg301_ignored_num_items_in_batch_bad.py", "gg301_ignored_num_items_in_batch_good.py")
#: No automatic fix (``gradguard lint --fix`` leaves its findings as they are).
FIX_SAFETY = None


def check_module(module: Module, report: Report) -> None:
    for fn, cls in module.compute_losses:
        args = fn.args
        param = next(
            (a for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg == "num_items_in_batch"),
            None,
        )
        if param is None:
            continue
        if module.project.decides_loss_scaling(cls.name, module.filename):
            # `model_accepts_loss_kwargs = False` (in the class or a base): the Trainer divides the
            # mean loss by the accumulation steps; `loss_is_scaled_for_ga` says what the loss is
            continue
        if any(isinstance(n, ast.Attribute) and "gradient_accumulation_steps" in n.attr for stmt in fn.body for n in subtree(stmt)):
            continue  # scales for the window itself (`loss / self.current_gradient_accumulation_steps`)
        if any(isinstance(n, ast.Name) and n.id == "num_items_in_batch" for stmt in fn.body for n in subtree(stmt)):
            continue
        if any(isinstance(n, ast.Call) and any(k.arg is None for k in n.keywords) and _passes_locals(n) for stmt in fn.body for n in subtree(stmt)):
            continue  # `**locals()`-style forwarding
        report(
            CODE,
            fn,
            f"`{cls.name}.compute_loss` accepts `num_items_in_batch` and never uses it: with gradient accumulation "
            f"the Trainer expects a loss summed over the window's items divided by num_items_in_batch, and gets "
            f"a per-micro-batch mean.",
        )


def _passes_locals(call: ast.Call) -> bool:
    return any(k.arg is None and isinstance(k.value, ast.Call) and getattr(k.value.func, "id", "") == "locals" for k in call.keywords)
