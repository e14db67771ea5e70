"""GG101 stale gradient: a step (or a hand-written update) reuses gradient already applied."""

from __future__ import annotations

from .._view import PassView, StepView, at, plural

CODE = "GG101"


def at_step(view: StepView) -> None:
    if view.stale:
        view.report(
            CODE,
            f"{view.name}.step() (step {view.n}) used the .grad of {plural(len(view.stale), 'parameter')} still holding "
            "gradient that an earlier step had already applied.",
            view.site, view.n, view.stale,
        )


def at_pass(view: PassView) -> None:
    # A parameter no optimizer holds, changed in place since the last pass reached it while
    # its .grad was neither cleared nor stepped: an update by hand (p -= lr * p.grad), and
    # this pass adds to the gradient that update already applied.
    if view.stale:
        view.report(
            CODE,
            f"The backward pass at {at(view.site, view.site)} added gradient to the .grad of "
            f"{plural(len(view.stale), 'parameter')} that were updated in place since the previous backward pass "
            "(an update by hand) without clearing .grad, so it still holds the gradient already applied.",
            view.site, None, view.stale,
        )
