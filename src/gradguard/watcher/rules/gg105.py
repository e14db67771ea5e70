"""GG105 unequal weighting: the window's micro-batches weigh differently from what their item counts say.

A mean-reduced loss over ``n`` items, multiplied by ``f``, gives each of its
items the weight ``f / n``. The window's gradient is the mean over all its
items only when that weight is the same for every micro-batch: ``loss / k``
with unequal ``n`` (a mean of means) breaks it, and so does a factor that
changes from one micro-batch to the next with equal ``n`` (``loss / (i + 1)``
with a running micro-step counter). A micro-batch with no items (``n = 0``:
every target ignored, its mean NaN) and a factor other than 0 breaks it too: its
share of the weight reaches no item.
"""

from __future__ import annotations

import torch

from .._view import EndView, StepView, at

CODE = "GG105"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_window": 30, "at_end": 30}


def at_window(view: StepView, site, group) -> None:
    managed = any(ps.managed for ps in group)
    if managed and not all(ps.managed and not ps.counted for ps in group):
        return  # gradguard weights these losses itself, exactly (it has their item counts)
    # An Accumulator without item counts (count=None) scales every micro-batch by the
    # same 1/steps: GG105 applies exactly as for a plain loss / steps.
    infos = [ps.info for ps in group]
    if not all(i.kind == "mean" for i in infos):
        return
    factors = [i.factor for i in infos]
    counts = [i.count for i in infos]
    if any(f is None for f in factors) or any(c is None for c in counts):
        return  # weighted unknowably: claim nothing
    if any(isinstance(c, torch.Tensor) for c in counts):
        deferred = view.memory[CODE].deferred
        if len(deferred) < 256:
            deferred.append((site, view.n, view.name, counts, factors, view.with_grad))  # item counts on a device
        return
    _judge(view.report, site, view.n, view.name, counts, factors, view.with_grad)


class State:
    """Windows whose item counts are tensors on a device: judged when the watch ends, not to sync each step."""

    def __init__(self, clock=None):
        self.deferred: list = []


def at_end(view: EndView) -> None:
    memory = view.memory[CODE]
    deferred, memory.deferred = memory.deferred, []
    for site, n, opt_name, counts, factors, params in deferred:
        # One read per count, once, after training: the only device syncs the watch makes.
        values = [float(c.detach().cpu()) if isinstance(c, torch.Tensor) else c for c in counts]
        _judge(view.report, site, n, opt_name, values, factors, params)


def _spread(values) -> bool:
    lo, hi = min(values), max(values)
    return hi - lo > 1e-6 * max(abs(hi), abs(lo))


def _shown(values, fmt="g") -> str:
    return ", ".join(format(v, fmt) for v in values[:8]) + (", ..." if len(values) > 8 else "")


def _judge(report, site, n, opt_name, counts, factors, params) -> None:
    if any(c < 0 for c in counts):
        return
    # A micro-batch with no items (every target ignored: its mean is 0/0, NaN, with a zero
    # gradient) weighs nothing only if its factor is 0, as with exact weights (count / total).
    # With any other factor it took a share of the window's weight that no item received.
    lost = any(c == 0 and f != 0 for c, f in zip(counts, factors))
    kept = [(c, f) for c, f in zip(counts, factors) if c > 0]
    if not kept:
        return  # no items at all: nothing to weigh
    if not lost and not _spread([f / c for c, f in kept]):
        return
    k = len(counts)
    empty = "; a micro-batch with no items (a NaN mean) still took its share of the weight" if lost else ""
    if not _spread(factors):
        detail = (f"{opt_name}.step() (step {n}) averaged {k} mean-reduced losses from {at(site, site)} over "
                  f"different numbers of items ({_shown(counts)}) with equal weights{empty}.")
    else:
        detail = (f"{opt_name}.step() (step {n}) summed {k} mean-reduced losses from {at(site, site)} whose items "
                  f"weigh differently: item counts ({_shown(counts)}), loss factors ({_shown(factors, '.4g')}){empty}; "
                  "each factor should be its micro-batch's share of the window's items.")
    report(CODE, detail, site, n, params)
