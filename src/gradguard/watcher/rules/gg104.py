"""GG104 unscaled accumulation: several mean losses of one line summed into one step, none scaled down.

A loss that adds up several means (``alpha * kl + (1 - alpha) * ce``,
``mse + l1 * sparsity.mean()``) is a mean over the micro-batch too. It counts as
scaled down when the whole sum was multiplied by a factor below 1 (``(a + b) /
k``) or when its terms' weights add up to less than 1 (each term divided by
``k``); a weighted sum whose weights add up to 1 or more and that nothing
divides is not. Sum-reduced terms are left out of the judgement: their
gradient adds up across micro-batches as a sum's should.
"""

from __future__ import annotations

from .._view import StepView, at

CODE = "GG104"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_window": 20, "at_step": 45}


def _not_scaled_down(ps) -> bool:
    info = ps.info
    if not info.scaled:
        return True
    if info.factor is None or abs(info.factor) < 1.0:
        return False
    return info.terms == 1 or (info.outer is not None and abs(info.outer) >= 1.0)


def at_window(view: StepView, site, group) -> None:
    if any(ps.managed for ps in group):
        return  # gradguard weights these losses itself
    if any(view.memory["GG114"].evaluation(view.ost, ps.index) for ps in group):
        return  # evaluation passes leaked into this step (GG114's): not a window the loop accumulates
    if not all(ps.info.kind == "mean" for ps in group):
        return
    if not all(_not_scaled_down(ps) for ps in group):
        return
    factor = view.grad_factor if not any(ps.info.amp for ps in group) else None
    if factor is not None:
        # the window divided on its gradients before the step (`p.grad /= K`, a wrapper that
        # divides .grad): each pass's weight is its loss's factor times this one, and together
        # they make the window's mean. Only an exact 1/K counts: clip_grad_norm_ rescales in place
        # too, by a factor that has nothing to do with K, and must not hide a missing division
        # (AMP's unscale_ as well: its passes are left out above).
        loss = max(abs(ps.info.factor) if ps.info.scaled and ps.info.factor is not None else 1.0 for ps in group)
        if abs(factor * loss * len(group) - 1.0) <= 1e-3:
            return
        if len(group) > 1 and abs(factor * loss * len(group) ** 2 - 1.0) <= 1e-3:
            return  # divided by K twice on its gradients: scaled down, too much (GG113's)
        full = view.memory["GG111"].full.get((site, id(view.ost)))
        if full is not None and len(group) < full and abs(factor * loss * full - 1.0) <= 1e-3:
            return  # a short window divided by the full windows' K on its gradients: GG111's
    if all(_not_scaled_down(ps) for ps in group):
        terms = max(ps.info.terms for ps in group)
        what = "mean-reduced loss" if terms == 1 else f"loss adding up {terms} mean-reduced terms"
        view.report(
            CODE,
            f"{view.name}.step() (step {view.n}) used {len(group)} backward passes of the {what} at "
            f"{at(site, site)}, none of them scaled down.",
            site, view.n, view.with_grad,
        )


def at_step(view: StepView) -> None:
    """Two passes of different lines applied by one step, the later made after the parameters the earlier
    reached were changed in place while its gradient still waited (a SAM step whose first pass was not
    cleared before the pass at the perturbed weights): not two losses of one model summed on purpose, but
    gradients taken at two different weights added up, none scaled down."""
    passes = view.passes
    if len(passes) < 2:
        return
    for ps in sorted(passes.values(), key=lambda p: p.index):
        first = passes.get(ps.after_moved) if ps.after_moved is not None else None
        if first is None or first.site == ps.site or ps.site[0] is None or first.site[0] is None:
            continue
        group = [first, ps]
        if any(p.managed for p in group) or not all(p.info.kind == "mean" and _not_scaled_down(p) for p in group):
            return
        view.report(
            CODE,
            f"{view.name}.step() (step {view.n}) applied the backward pass at {at(first.site, first.site)} and the "
            f"one at {at(ps.site, ps.site)}, made after the parameters were changed in place while the first "
            "pass's gradient was still in .grad: gradients taken at two different weights added up, none scaled "
            "down (a SAM-style step whose first pass was not cleared).",
            ps.site, view.n, view.with_grad,
        )
        return
