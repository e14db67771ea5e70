"""GG104 unscaled-accumulation: an accumulation loop back-propagates a mean loss that
nothing divided by the number of micro-batches (not inside ``accelerator.accumulate``,
which divides for the user)."""

from __future__ import annotations

import ast

from .._events import BACKWARD, text
from .._loss import loss_scale, scales_gradients
from .._model import ACCUM_NAME, Loop, Report, backward_tensor, steps_after

CODE = "GG104"


def check_loop(loop: Loop, report: Report) -> None:
    # inside `accelerator.accumulate(model)` Accelerate divides the loss itself
    if not loop.trains or loop.accumulate or scales_gradients(loop.node) or loop.module.sums_in(loop.scope):
        return
    windows = loop.window_paths()
    if windows:
        candidates = [e for m in windows for e in m.events if e.kind == BACKWARD]
    elif (
        not loop.steps
        and isinstance(loop.node, (ast.For, ast.AsyncFor))
        and ACCUM_NAME.search(text(loop.node.iter) + text(loop.node.target))
        and steps_after(loop)
    ):
        # nanoGPT's shape: `for micro_step in range(gradient_accumulation_steps): ... backward()`,
        # then one step for the window
        candidates = list(loop.backwards)
    else:
        return
    for b in dict.fromkeys(candidates):
        if loss_scale(backward_tensor(b.node), loop.scope_of(b), loop) == "raw":
            report(
                CODE,
                b.node,
                f"`{text(b.node.func)}()` accumulates over several micro-batches a mean loss that is not divided "
                f"by the number of micro-batches.",
                loop=loop, backward=b.node, accum=loop.window_size(),
            )
