"""GG113 overscaled window: a full window whose every pass was divided by its size twice.

A step fed by K >= 2 passes of one backward line, each a mean-reduced loss
multiplied by exactly 1/K² (read from the loss's autograd graph), applies 1/K of
the window mean: the loss was divided by K by the user and again by K by the
code around it (a helper that already divides, or a framework whose backward
divides by its accumulation steps: Accelerate's ``accelerator.backward`` inside
``accumulate`` divides the loss tensor before back-propagating it, so its factor
shows in the graph like the user's own). A factor the watch cannot read on the
host, a composite loss, a GradScaler's loss and gradguard's own passes are not
judged; nor is a single pass per step (a constant 1/K² with no window is a
weight, not a window), nor a short window of a line whose full windows GG111
has seen hold another number of passes (2 passes each divided by 4 is the
final partial window of a loop of windows of 4: GG111's finding).
"""

from __future__ import annotations

from typing import Dict

from .._view import StepView, at, plural

CODE = "GG113"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_window": 40}
_TOL = 1e-9


class State:
    """Per (backward line, optimizer): the most passes any of its windows held so far."""

    def __init__(self, clock) -> None:
        self.largest: Dict[tuple, int] = {}


def at_window(view: StepView, site, group) -> None:
    k = len(group)
    key = (site, id(view.ost))
    state: State = view.memory[CODE]
    before = state.largest.get(key, 0)
    state.largest[key] = max(before, k)
    if before > k:
        # A shorter window after longer ones of the same line is a final partial window (Accelerate
        # ends a dataloader's last window early, its passes still divided by the full K): 1/k² there
        # is K'/K of the mean, an under-scale that GG111 owns, not every window divided twice.
        return
    if k < 2 or any(ps.managed or ps.info.amp for ps in group):
        return
    full = view.memory["GG111"].full.get((site, id(view.ost)))
    if full is not None and full != k:
        return  # a short window of a line whose full windows hold ``full`` passes: GG111's (1/k² = 1/full)
    for ps in group:
        info = ps.info
        if info.kind != "mean" or info.terms != 1 or not info.scaled or info.factor is None:
            return
        if abs(info.factor * k * k - 1.0) > _TOL * k * k:
            return
    view.report(
        CODE,
        f"{view.name}.step() (step {view.n}) used {plural(k, 'backward pass', 'backward passes')} of the mean-reduced "
        f"loss at {at(site, site)}, each multiplied by 1/{k * k} = 1/{k} twice: the step applies 1/{k} of the "
        "window's mean gradient.",
        site, view.n, view.with_grad,
    )
