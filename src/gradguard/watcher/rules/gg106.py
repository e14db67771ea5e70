"""GG106 orphan gradient: parameters that receive gradients but no optimizer holds."""

from __future__ import annotations

from typing import Dict, List

from .._view import EndView, at, plural

CODE = "GG106"


def at_end(view: EndView) -> None:
    if not view.opts:
        return  # no optimizer stepped: a loop that updates by hand, nothing to compare with
    held = set()
    for ost in view.all_opts:
        held |= ost.ids
    orphans: Dict[tuple, List] = {}
    for st in view.params:
        if st.got and id(st.p) not in held:
            orphans.setdefault(st.first_site, []).append(st)
    for site, states in orphans.items():
        view.report(
            CODE,
            f"{plural(len(states), 'parameter')} received gradients from the backward pass at {at(site, site)} "
            "but no optimizer holds them.",
            site, None, states,
        )
