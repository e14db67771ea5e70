"""The run-time rules GG101–GG110: when each fires, from the watch's bookkeeping.

Each check claims only what the bookkeeping shows for certain; where it cannot
tell (a loss scaled by a factor held on a GPU, a buffer modified in place by
code the watch did not see), it says nothing. The words of every finding come
from :mod:`gradguard.rules`; here are only the specifics (which step, which
line, how many passes).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import torch

from ._source import Site
from ._state import OptState, ParamState, Pass

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine


def _at(site: Site, here: Optional[Site] = None) -> str:
    """``line 12`` when in the finding's own file, else a short ``path:line``."""
    if site[0] is None:
        return "an unknown location"
    if here is not None and here[0] == site[0]:
        return f"line {site[1]}"
    path = site[0]
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    except ValueError:  # another drive on Windows
        pass
    return f"{path}:{site[1]}"


def _plural(n: int, word: str, many: str = "") -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _not_scaled_down(ps: Pass) -> bool:
    info = ps.info
    if not info.scaled:
        return True
    return info.factor is not None and abs(info.factor) >= 1.0


def step(engine: "Engine", ost: OptState, site: Site) -> None:
    """Checks at ``optimizer.step()``: GG101, GG104, GG105, GG107, GG108, GG109, GG110."""
    n = ost.steps + 1
    with_grad: List[ParamState] = []
    stale: List[ParamState] = []
    graph: List[ParamState] = []
    zero_only: List[ParamState] = []
    passes: Dict[int, Pass] = {}
    # Engine.observe_all fused with the classification: one read of .grad per parameter.
    observe = engine.observe
    graphs = engine.graph_grads  # only backward(create_graph=True) leaves a graph in .grad
    last = None
    for st in ost.params:
        g = st.p.grad
        ref = st.ref
        if g is None:
            if ref is not None:
                observe(st)  # cleared since the last event
            continue
        if ref is None or g._version != st.ver or ref() is not g:
            observe(st)
        pending = st.pending
        if st.zero and not pending:
            zero_only.append(st)
            continue
        with_grad.append(st)
        if st.consumed:
            stale.append(st)
        if graphs and g.requires_grad:
            graph.append(st)
        for ps in pending:
            if ps is not last:
                passes[ps.index] = last = ps

    ost.fed = passes  # every pending pass is in there (a parameter without one is not in with_grad)
    if not with_grad:
        if ost.discard_at == ost.steps:
            # The gradient was there and was cleared unused in this interval: that clearing
            # is the cause, and GG102 judges it (a systematic discard is reported once, as
            # GG102 at the clearing line; a deliberate skip is not reported at all).
            return
        how = " (their .grad was zero-filled by zero_grad(set_to_none=False) with no backward pass since)" if zero_only else ""
        engine.report(
            "GG110",
            f"{ost.name}.step() (step {n}) ran while none of its {_plural(len(ost.params), 'parameter')} had a gradient{how}.",
            site, n, zero_only,
        )
        return
    if stale:
        engine.report(
            "GG101",
            f"{ost.name}.step() (step {n}) used the .grad of {_plural(len(stale), 'parameter')} still holding gradient "
            "that an earlier step had already applied.",
            site, n, stale,
        )
    if graph:
        engine.report(
            "GG108",
            f"At {ost.name}.step() (step {n}) the .grad of {_plural(len(graph), 'parameter')} requires grad: "
            "it holds an autograd graph (backward(create_graph=True)).",
            site, n, graph,
        )
    if zero_only and ost.moves_zero:
        engine.report(
            "GG107",
            f"At {ost.name}.step() (step {n}) {_plural(len(zero_only), 'parameter')} had a zero-filled .grad "
            "(zero_grad(set_to_none=False)) and no gradient since; this optimizer uses momentum, Adam moments "
            "or weight decay, so it still moves them.",
            site, n, zero_only,
        )
    _accumulation(engine, ost, n, passes, with_grad)


def _accumulation(engine: "Engine", ost: OptState, n: int, passes: Dict[int, Pass], params: List[ParamState]) -> None:
    """GG104, GG105, GG109: a step fed by several passes of one backward call (an accumulation loop).

    Passes from *different* lines are different losses added on purpose (a
    GAN discriminator's real and fake terms, a multi-task loss), which is not
    accumulation; only repeated passes of the same call are micro-batches.
    Neither are passes that keep their graph (``retain_graph=True``): several
    losses of one forward pass, back-propagated one by one in a loop.
    """
    by_site: Dict[Site, List[Pass]] = {}
    for ps in passes.values():
        if ps.site[0] is not None:
            by_site.setdefault(ps.site, []).append(ps)
    for site, group in by_site.items():
        k = len(group)
        if k < 2 or any(ps.retained for ps in group):
            continue
        _batch_stats(engine, ost, n, site, k, params)
        managed = any(ps.managed for ps in group)
        if managed and not all(ps.managed and not ps.counted for ps in group):
            continue  # the Accumulator weights these losses itself, exactly (it has their item counts)
        # An Accumulator without item counts (count=None) scales every micro-batch by the
        # same 1/steps: GG104 cannot apply, GG105 does exactly as for a plain loss / steps.
        infos = [ps.info for ps in group]
        if not all(i.kind == "mean" for i in infos):
            continue
        if not managed and all(_not_scaled_down(ps) for ps in group):
            engine.report(
                "GG104",
                f"{ost.name}.step() (step {n}) used {k} backward passes of the mean-reduced loss at {_at(site, site)}, "
                "none of them scaled down.",
                site, n, params,
            )
        factors = [i.factor for i in infos]
        if any(f is None for f in factors) or max(factors) - min(factors) > 1e-6 * max(abs(f) for f in factors):
            continue  # weighted differently (or unknowably): not a plain mean of means
        counts = [i.count for i in infos]
        if any(isinstance(c, torch.Tensor) for c in counts):
            if len(engine.deferred) < 256:  # item counts on a device: read them once, at the end
                engine.deferred.append((site, n, ost.name, counts, params))
            continue
        _unequal(engine, site, n, ost.name, counts, params)


def _unequal(engine: "Engine", site: Site, n: int, opt_name: str, counts, params) -> None:
    if any(c is None for c in counts):
        return
    lo, hi = min(counts), max(counts)
    if hi - lo > 1e-6 * max(abs(hi), 1.0):
        shown = ", ".join(f"{c:g}" for c in counts[:8]) + (", ..." if len(counts) > 8 else "")
        engine.report(
            "GG105",
            f"{opt_name}.step() (step {n}) averaged {len(counts)} mean-reduced losses from {_at(site, site)} over "
            f"different numbers of items ({shown}) with equal weights.",
            site, n, params,
        )


def _batch_stats(engine: "Engine", ost: OptState, n: int, site: Site, k: int, params: List[ParamState]) -> None:
    if not engine.bn_ran:
        return
    ran = [engine.bn_modules[mid] for mid, t in engine.bn_ran.items() if t > ost.clock]
    if not ran:
        return
    mine = [m for m in ran if _feeds(engine, m, ost)]
    if mine:
        names = sorted({type(m).__name__ for m in mine})
        engine.report(
            "GG109",
            f"{ost.name}.step() (step {n}) accumulated {k} backward passes from {_at(site, site)} through "
            f"{_plural(len(mine), 'layer')} using batch statistics in training mode ({', '.join(names)}).",
            site, n, [engine.state(p) for m in mine for p in m.parameters()] or params,
        )


def _feeds(engine: "Engine", bn: torch.nn.Module, ost: OptState) -> bool:
    """Does this batch-norm layer belong to a model this optimizer trains?"""
    if any(id(p) in ost.ids for p in bn.parameters()):
        return True
    for m in engine.modules.values():
        if m is bn or not any(id(p) in ost.ids for p in m.parameters()):
            continue
        if any(sub is bn for sub in m.modules()):
            return True
    return False


def discarded(engine: "Engine", ps: Pass, st: ParamState, site: Optional[Site], intervals: int = 1) -> None:
    """GG102: every gradient of ``ps`` was cleared before any step applied it, systematically.

    ``Engine.discard`` decides when a discard is systematic: the same clearing line
    discarded finite gradient in ``intervals`` consecutive optimizer-step intervals
    from its first discard on (an occasional deliberate skip is not reported).
    """
    where = site if site is not None and site[0] is not None else ps.site
    cleared = f" (cleared at {_at(site, where)})" if site is not None and site[0] is not None else ""
    step_no = st.opt.steps + 1 if st.opt is not None else None
    every = f"; this clearing did so in {intervals} consecutive optimizer-step intervals" if intervals > 1 else ""
    engine.report(
        "GG102",
        f"The backward pass at {_at(ps.site, where)} put gradients into {_plural(len(ps.params), 'parameter')} and all of "
        f"them were cleared{cleared} before any optimizer step used them{every}.",
        where, step_no, ps.params,
    )


def end(engine: "Engine") -> None:
    """Checks when the watch ends: GG103, GG106, and GG105 with item counts read from a device."""
    stepped = [ost for ost in engine.opts.values() if ost.steps > 0]
    # GG103: passes never used by any step whose gradient still waits in a stepped optimizer's buffers.
    waiting: Dict[Site, Tuple[Dict[int, Pass], List[ParamState], OptState]] = {}
    for ost in stepped:
        for st in ost.params:
            for ps in st.pending:
                if ps.used:
                    continue
                entry = waiting.setdefault(ps.site, ({}, [], ost))
                entry[0][ps.index] = ps
                if not entry[1] or entry[1][-1] is not st:
                    entry[1].append(st)
    for site, (group, states, ost) in waiting.items():
        engine.report(
            "GG103",
            f"{_plural(len(group), 'backward pass', 'backward passes')} at {_at(site, site)} put gradients into "
            f"{ost.name}'s parameters that no optimizer step applied before the end (its last step was step {ost.steps}).",
            site, ost.steps, states,
        )
    if stepped:
        held = set()
        for ost in engine.opts.values():
            held |= ost.ids
        orphans: Dict[Site, List[ParamState]] = {}
        for st in engine.params.values():
            if st.got and id(st.p) not in held:
                orphans.setdefault(st.first_site, []).append(st)
        for site, states in orphans.items():
            engine.report(
                "GG106",
                f"{_plural(len(states), 'parameter')} received gradients from the backward pass at {_at(site, site)} "
                "but no optimizer holds them.",
                site, None, states,
            )
    if engine.deferred:
        deferred, engine.deferred = engine.deferred, []
        for site, n, opt_name, counts, params in deferred:
            # One read per count, once, after training: the only device syncs the watch makes.
            values = [float(c.detach().cpu()) if isinstance(c, torch.Tensor) else c for c in counts]
            _unequal(engine, site, n, opt_name, values, params)
