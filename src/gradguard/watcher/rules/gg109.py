"""GG109 batch statistics: accumulating micro-batches through layers that normalise by the micro-batch."""

from __future__ import annotations

from .._view import StepView, at, plural

CODE = "GG109"


def at_window(view: StepView, site, group) -> None:
    layers = view.batch_stats()
    if layers:
        names = sorted({type(m).__name__ for m in layers})
        view.report(
            CODE,
            f"{view.name}.step() (step {view.n}) accumulated {len(group)} backward passes from {at(site, site)} through "
            f"{plural(len(layers), 'layer')} using batch statistics in training mode ({', '.join(names)}).",
            site, view.n, [p for m in layers for p in m.parameters()] or view.with_grad,
        )
