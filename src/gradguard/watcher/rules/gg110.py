"""GG110 step without gradient: an optimizer step while none of its parameters has a gradient."""

from __future__ import annotations

from .._view import StepView, plural

CODE = "GG110"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_empty_step": 20}


def at_empty_step(view: StepView) -> None:
    if view.discarded:
        # The gradient was there and was cleared unused in this interval: that clearing
        # is the cause, and GG102 judges it (a systematic discard is reported once, as
        # GG102 at the clearing line; a deliberate skip is not reported at all).
        return
    how = (" (their .grad was zero-filled by zero_grad(set_to_none=False) with no backward pass since)"
           if view.zero_only else "")
    view.report(
        CODE,
        f"{view.name}.step() (step {view.n}) ran while none of its {plural(len(view.params), 'parameter')} had a gradient{how}.",
        view.site, view.n, view.zero_only,
    )
