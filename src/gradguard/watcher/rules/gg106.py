"""GG106 orphan gradient: parameters that receive gradients but no optimizer holds."""

from __future__ import annotations

from typing import Dict, List

from .._view import EndView, at, plural

CODE = "GG106"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_end": 20}


def at_end(view: EndView) -> None:
    if not view.opts:
        return  # no optimizer stepped: a loop that updates by hand, nothing to compare with
    orphans: Dict[tuple, List] = {}
    for p, site in view.orphans():
        orphans.setdefault(site, []).append(p)
    for site, states in orphans.items():
        view.report(
            CODE,
            f"{plural(len(states), 'parameter')} received gradients from the backward pass at {at(site, site)} "
            "but no optimizer holds them.",
            site, None, states,
        )
