"""GG103 unapplied gradient: backward passes whose gradient no step applied before the end."""

from __future__ import annotations

from typing import Dict, List, Tuple

from .._view import EndView, at, plural

CODE = "GG103"


def at_end(view: EndView) -> None:
    waiting: Dict[tuple, Tuple[dict, List, object]] = {}
    for ost in view.opts:
        for ps, params in view.unapplied(ost):
            entry = waiting.setdefault(ps.site, ({}, [], ost))
            entry[0][ps.index] = ps
            seen = set(map(id, entry[1]))
            entry[1].extend(p for p in params if id(p) not in seen)
    for site, (group, states, ost) in waiting.items():
        view.report(
            CODE,
            f"{plural(len(group), 'backward pass', 'backward passes')} at {at(site, site)} put gradients into "
            f"{ost.name}'s parameters that no optimizer step applied before the end (its last step was step {ost.steps}).",
            site, ost.steps, states,
        )
