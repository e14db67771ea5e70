"""GG107 zero, not None: a zero-filled .grad still moves parameters under momentum, Adam or weight decay."""

from __future__ import annotations

from .._view import StepView, plural

CODE = "GG107"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_step": 30}


def at_step(view: StepView) -> None:
    if view.zero_only and view.moves_zero:
        view.report(
            CODE,
            f"At {view.name}.step() (step {view.n}) {plural(len(view.zero_only), 'parameter')} had a zero-filled .grad "
            "(zero_grad(set_to_none=False)) and no gradient since; this optimizer uses momentum, Adam moments "
            "or weight decay, so it still moves them.",
            view.site, view.n, view.zero_only,
        )
