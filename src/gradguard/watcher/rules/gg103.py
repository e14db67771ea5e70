"""GG103 unapplied gradient: backward passes whose gradient no step applied before the end.

Two cases: gradient left after an optimizer's last step (the final partial
window dropped), and an optimizer that never stepped at all while two or more
backward passes accumulated into its parameters (a step condition that is
never met). A program that only computes gradients (saliency, a gradient
check) is not reported: it has no optimizer holding those parameters, or
inspects one backward pass, not an accumulation of several. Passes made with the
model in ``eval()`` mode where the optimizer's steps applied passes in training
mode (evaluation code that back-propagates; see GG114) are no window of the loop.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from .._view import EndView, at, plural

CODE = "GG103"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_every_step": 10, "at_end": 10}


class State:
    """The optimizers whose step() was called (even one that a finding in "raise" mode stopped)."""

    def __init__(self, clock=None):
        self.called: set = set()


def at_every_step(view) -> None:
    view.memory[CODE].called.add(view.ost)


def _group(view: EndView, osts) -> Dict[tuple, Tuple[dict, List, object]]:
    waiting: Dict[tuple, Tuple[dict, List, object]] = {}
    leaked = view.memory["GG114"]
    for ost in osts:
        for ps, params in view.unapplied(ost):
            if leaked.evaluation(ost, ps.index):
                continue  # evaluation code's pass (the model in eval() mode), not a window of the loop
            entry = waiting.setdefault(ps.site, ({}, [], ost))
            entry[0][ps.index] = ps
            seen = set(map(id, entry[1]))
            entry[1].extend(p for p in params if id(p) not in seen)
    return waiting


def at_end(view: EndView) -> None:
    for site, (group, states, ost) in _group(view, view.opts).items():
        view.report(
            CODE,
            f"{plural(len(group), 'backward pass', 'backward passes')} at {at(site, site)} put gradients into "
            f"{ost.name}'s parameters that no optimizer step applied before the end (its last step was step {ost.steps}).",
            site, ost.steps, states,
        )
    called = view.memory[CODE].called
    never = [ost for ost in view.never_stepped() if ost not in called]
    if not never:
        return
    waiting = _group(view, never)
    if sum(len(group) for group, _, _ in waiting.values()) < 2:
        return  # one pass inspected, not an accumulation waiting for its step
    for site, (group, states, ost) in waiting.items():
        view.report(
            CODE,
            f"{plural(len(group), 'backward pass', 'backward passes')} at {at(site, site)} put gradients into "
            f"{ost.name}'s parameters, and {ost.name}.step() never ran: no update applied them.",
            site, 0, states,
        )
