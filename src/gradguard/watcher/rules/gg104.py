"""GG104 unscaled accumulation: several mean losses of one line summed into one step, none scaled down."""

from __future__ import annotations

from .._view import StepView, at

CODE = "GG104"


def _not_scaled_down(ps) -> bool:
    info = ps.info
    if not info.scaled:
        return True
    return info.factor is not None and abs(info.factor) >= 1.0


def at_window(view: StepView, site, group) -> None:
    if any(ps.managed for ps in group):
        return  # gradguard weights these losses itself
    if not all(ps.info.kind == "mean" for ps in group):
        return
    if all(_not_scaled_down(ps) for ps in group):
        view.report(
            CODE,
            f"{view.name}.step() (step {view.n}) used {len(group)} backward passes of the mean-reduced loss at "
            f"{at(site, site)}, none of them scaled down.",
            site, view.n, view.with_grad,
        )
