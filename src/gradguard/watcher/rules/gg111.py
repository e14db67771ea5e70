"""GG111 underscaled window: a short window whose losses were each divided by the full window's size.

At run time the watch does not know the loop's ``accum_steps``; it learns it
from the loop itself. Per backward line and optimizer, a step fed by K >= 2
passes of that line, each a mean-reduced loss multiplied by the same known
factor 1/K, shows that the loop divides each micro-batch by its window size K.
A later step of the same optimizer fed by K' < K passes of that line, each
still multiplied by 1/K, has a gradient K'/K of the mean over its items: the
final partial window divided by the full window size (the behaviour of a loop
that steps its remainder with ``loss / accum`` unchanged).

It claims nothing when it cannot tell: before a full window was seen, for
factors it cannot read on the host (a loss divided by a tensor), for losses
scaled by a ``GradScaler`` or weighted by gradguard itself, for windows that
change size on purpose with their divisor (K' passes divided by K' are
exact), and for passes made inside the same call as the step (a framework's
own loop, such as Lightning's automatic optimization, whose scaling is the
framework's; its Lightning integration makes that window exact).
"""

from __future__ import annotations

from typing import Dict, Optional

from .._view import StepView, at

CODE = "GG111"

_TOL = 1e-6


class State:
    """Per (backward line, optimizer): the window size K its full windows were divided by."""

    def __init__(self, clock=None):
        self.full: Dict[tuple, int] = {}


def _factor(group) -> Optional[float]:
    """The one known factor of every pass in ``group`` (mean-reduced losses), else None."""
    factors = []
    for ps in group:
        info = ps.info
        if ps.managed or ps.framework or ps.retained or info.amp or info.kind != "mean" or info.factor is None:
            return None
        factors.append(info.factor)
    f = factors[0]
    if f <= 0 or any(abs(g - f) > _TOL * abs(f) for g in factors):
        return None
    return f


def at_step(view: StepView) -> None:
    memory = view.memory[CODE].full
    for site, group in view.by_site().items():
        f = _factor(group)
        if f is None:
            continue
        key = (site, id(view.ost))
        k = len(group)
        if k >= 2 and abs(f * k - 1) <= _TOL:
            memory[key] = k  # a full window: each pass divided by the window's size
            continue
        full = memory.get(key)
        if full is not None and k < full and abs(f * full - 1) <= _TOL:
            view.report(
                CODE,
                f"{view.name}.step() (step {view.n}) used {k} backward {'pass' if k == 1 else 'passes'} of the "
                f"mean-reduced loss at {at(site, site)}, each divided by {full} like the earlier windows of {full} "
                f"passes, so its gradient is {k}/{full} of the mean over its items.",
                site, view.n, view.with_grad,
            )
