"""GG103 unapplied gradient: backward passes whose gradient no step applied before the end."""

from __future__ import annotations

from typing import Dict, List, Tuple

from .._view import EndView, at, plural

CODE = "GG103"


def at_end(view: EndView) -> None:
    waiting: Dict[tuple, Tuple[dict, List, object]] = {}
    for ost in view.opts:
        for st in ost.params:
            for ps in st.pending:
                if ps.used:
                    continue
                entry = waiting.setdefault(ps.site, ({}, [], ost))
                entry[0][ps.index] = ps
                if not entry[1] or entry[1][-1] is not st:
                    entry[1].append(st)
    for site, (group, states, ost) in waiting.items():
        view.report(
            CODE,
            f"{plural(len(group), 'backward pass', 'backward passes')} at {at(site, site)} put gradients into "
            f"{ost.name}'s parameters that no optimizer step applied before the end (its last step was step {ost.steps}).",
            site, ost.steps, states,
        )
