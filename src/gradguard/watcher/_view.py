"""What the rules read: a view of one step, one backward pass, one clearing, or the end of a watch.

The session builds a view at each event from the tracker's records; the rules
(``rules/``) read only views, keep their own memory in ``view.memory[CODE]``
and report through ``view.report``, so that a rule knows nothing of how the
buffers are tracked. Lists of parameters are made only when a rule asks.
"""

from __future__ import annotations

from itertools import compress
from operator import and_, or_
from typing import Callable, Dict, List, Optional, Tuple

import torch

from ..findings import short_path
from ._columns import Subset
from ._records import OptState, Pass
from ._source import Site
from ._tracker import Tracker

Report = Callable[..., None]  # (code, detail, site, step, params=(), advice=None)


def at(site: Site, here: Optional[Site] = None) -> str:
    """``line 12`` when in the finding's own file, else a short ``path:line``."""
    if site[0] is None:
        return "an unknown location"
    if here is not None and here[0] == site[0]:
        return f"line {site[1]}"
    return f"{short_path(site[0])}:{site[1]}"


def plural(n: int, word: str, many: str = "") -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


class StepView:
    """One ``optimizer.step()`` about to read ``.grad`` (or, with a closure, just after).

    ``params``/``grads``: the optimizer's parameters and their ``.grad`` now;
    ``with_grad``: those whose buffer holds gradient; ``stale``: those holding
    gradient an earlier step already applied; ``zero_only``: zero-filled by
    ``zero_grad`` with nothing since; ``passes``: the backward passes whose
    gradient it applies (by index); ``discarded``: its gradient was cleared
    unused in this interval; ``modules``: the modules seen running.
    """

    __slots__ = ("ost", "opt", "name", "n", "site", "params", "grads", "moves_zero", "with_grad_mask", "stale_mask",
                 "zero_mask", "by_hand", "passes", "discarded", "report", "memory", "clock", "modules", "_lists",
                 "measure", "_factor", "_unsynced", "_tracker", "_namer")

    def __init__(self, ost: OptState, site: Site, report: Report, memory: dict, clock: int, params: list,
                 grads: list, with_grad: list, stale: list, zero_only: list, by_hand: bool, passes: Dict[int, Pass],
                 modules: list):
        self.ost = ost
        self.opt = ost.opt
        self.name = ost.name
        self.n = ost.steps + 1
        self.site = site
        self.params = params
        self.grads = grads
        self.moves_zero = ost.moves_zero
        self.discarded = ost.discarded_in == ost.steps
        self.with_grad_mask, self.stale_mask, self.zero_mask = with_grad, stale, zero_only
        self.by_hand = by_hand
        #: () -> the factor the user's code rescaled the waiting .grad by since the last pass (None: not known)
        self.measure = None
        self._factor = False
        self._unsynced = False
        self.passes = passes
        self.report = report
        self.memory = memory
        self.clock = clock
        self.modules = modules
        self._lists: dict = {}
        self._tracker: Optional[Tracker] = None  # set by the session: for :meth:`orphans`
        self._namer: Optional[Callable] = None  # ... and the reporter's, to name the models holding them

    @property
    def grad_factor(self) -> Optional[float]:
        """The factor by which the user's code rescaled the waiting ``.grad`` since the last pass
        (``p.grad /= K`` before the step), measured when first asked (a norm and a sync); None
        when not known. 1.0: not rescaled."""
        if self._factor is False:
            self._factor = self.measure() if self.measure is not None else None
        return self._factor

    @property
    def grad_factor_unsynced(self) -> Optional[float]:
        """:attr:`grad_factor` where it needs no device sync: for a question asked at every step. A
        buffer on an accelerator that no in-place operation changed since the last pass (its version)
        is taken as not rescaled (1.0) without reading it."""
        if self._factor is not False:
            return self._factor
        if self._unsynced is False:
            self._unsynced = self.measure(True) if self.measure is not None else None
        return self._unsynced

    def _list(self, mask: list) -> List[torch.Tensor]:
        key = id(mask)
        out = self._lists.get(key)
        if out is None:
            out = self._lists[key] = list(compress(self.params, mask)) if any(mask) else []
        return out

    @property
    def with_grad(self) -> List[torch.Tensor]:
        return self._list(self.with_grad_mask)

    @property
    def stale(self) -> List[torch.Tensor]:
        return self._list(self.stale_mask)

    @property
    def zero_only(self) -> List[torch.Tensor]:
        return self._list(self.zero_mask)

    @property
    def has_grad(self) -> bool:
        return any(self.with_grad_mask)

    def orphans(self, skip: set) -> List[Tuple[torch.Tensor, Site]]:
        """Parameters that received gradient from a watched pass and that no live optimizer holds, with that
        pass's line; those whose id is in ``skip`` left out. Cheap while every parameter a pass reached is
        held (one test); else the live optimizers not seen yet are looked for once (see :func:`unheld`)."""
        return unheld(self._tracker, skip, self._namer) if self._tracker is not None else []

    def by_site(self) -> Dict[Site, List[Pass]]:
        """The step's passes grouped by backward line (passes whose line is unknown left out)."""
        out: Dict[Site, List[Pass]] = {}
        for ps in self.passes.values():
            if ps.site[0] is not None:
                out.setdefault(ps.site, []).append(ps)
        return out

    def windows(self) -> List[Tuple[Site, List[Pass]]]:
        """Accumulation windows: the step's passes grouped by backward line, two or more per line.

        Passes from *different* lines are different losses added on purpose (a
        GAN discriminator's real and fake terms, a multi-task loss), which is not
        accumulation; only repeated passes of the same call are micro-batches.
        Neither are passes that keep their graph (``retain_graph=True``): several
        losses of one forward pass, back-propagated one by one in a loop.
        Nor are passes of one line that each reach parameters no other pass of the group reaches (a locally
        supervised network back-propagating each block's own loss inside its forward): no buffer sums two of
        them, each parameter's gradient is one pass's.
        """
        return [(s, g) for s, g in self.by_site().items()
                if len(g) >= 2 and not any(ps.retained for ps in g) and _share_a_buffer(g)]


def _share_a_buffer(group: List[Pass]) -> bool:
    """Two passes of ``group`` reached one parameter; True where a pass's mask is unknown (reached nothing)."""
    masks = [ps.reached for ps in group]
    if not all(any(m) for m in masks):
        return True
    acc = list(masks[0])
    for m in masks[1:]:
        if any(map(and_, acc, m)):
            return True
        if len(m) > len(acc):
            acc += [False] * (len(m) - len(acc))
        acc[:len(m)] = map(or_, acc[:len(m)], m)
    return False


def unheld(tracker: Tracker, skip: set, namer: Optional[Callable] = None) -> List[Tuple[torch.Tensor, Site]]:
    """Parameters a watched pass reached that no optimizer holds (ids in ``skip`` left out), with the line of
    the first pass that reached them.

    The watch learns of an optimizer when it steps or clears: one that has done neither yet (a GAN's second
    optimizer before its first step) is looked for among the live objects, and registered, before a
    parameter is called held by none. Only when such parameters are new: ``skip`` holds those judged. In the
    same look, the models holding them are handed to ``namer`` (their forward may have run before the watch
    learned the models), so that a finding can name them."""
    if not tracker.first_site:
        return []

    def candidates():  # (positions move when an optimizer is registered: read afresh)
        return [i for i in tracker.first_site if tracker.owner[i] is None and id(tracker.params[i]) not in skip]

    if not candidates():
        return []
    import gc

    wanted = {id(tracker.params[i]) for i in candidates()}
    known = {id(ost.opt) for ost in tracker.opts.values()}
    # the models to name: those holding any parameter the watch follows (all of them named together, so that
    # several models get their prefixes as at the end of the watch)
    followed = set(map(id, tracker.params))
    owners, parent = [], {}
    for obj in gc.get_objects():
        kind = type(obj)
        if issubclass(kind, torch.optim.Optimizer) and id(obj) not in known:
            try:
                held = [id(p) for group in obj.param_groups for p in group["params"]]
            except Exception:
                continue
            if not wanted.isdisjoint(held):
                tracker.opt_state(obj)  # registered now: its parameters get their owner (columns may move)
        elif namer is not None and issubclass(kind, torch.nn.Module):
            mine = getattr(obj, "_parameters", None) or {}
            if any(p is not None and id(p) in followed for p in mine.values()):
                owners.append(obj)
            for child in (getattr(obj, "_modules", None) or {}).values():
                if child is not None:
                    parent[id(child)] = obj
    if owners:
        # each owner's outermost enclosing module that runs (has a forward): a ModuleList or ModuleDict never
        # runs, so the models kept in one are roots, as among the modules seen running
        roots = {}
        for m in owners:
            top, seen = m, set()
            while id(m) in parent and id(m) not in seen:
                seen.add(id(m))
                m = parent[id(m)]
                if type(m).forward is not torch.nn.Module.forward:
                    top = m
            roots[id(top)] = top
        namer(list(roots.values()))
    return [(tracker.params[i], tracker.first_site[i]) for i in candidates()]


class PassView:
    """A backward pass about to run: ``stale`` are parameters updated by hand with their gradient still in ``.grad``."""

    __slots__ = ("site", "stale", "report", "memory")

    def __init__(self, site: Site, stale: List[torch.Tensor], report: Report, memory: dict):
        self.site, self.stale, self.report, self.memory = site, stale, report, memory


class ModuleView:
    """A module seen running for the first time."""

    __slots__ = ("module", "memory")

    def __init__(self, module: torch.nn.Module, memory: dict):
        self.module, self.memory = module, memory


class ClearView:
    """A ``zero_grad`` at ``site`` about to clear the buffers of ``sub``, while ``waiting`` passes' gradient waits.

    ``wants(code)``: whether a finding of ``code`` at ``site`` would still be reported.
    """

    __slots__ = ("site", "waiting", "memory", "_sub", "_tracker", "_reporter")

    def __init__(self, site: Site, sub: Subset, waiting: List[Pass], tracker: Tracker, reporter, memory: dict):
        self.site, self.waiting, self.memory = site, waiting, memory
        self._sub, self._tracker, self._reporter = sub, tracker, reporter

    def wants(self, code: str) -> bool:
        return self._reporter.wants(code, self.site)

    def cleared_whole(self, ps: Pass) -> Tuple[Optional[OptState], List[torch.Tensor]]:
        """If this clearing takes all of ``ps``'s waiting gradient: the optimizer holding it and those
        buffers; else ``(None, [])``."""
        tracker = self._tracker
        everything = tracker.everything()
        waits = tracker.waiting(ps, everything)
        positions = [i for i, w in enumerate(waits) if w]
        if not positions or tracker.owner[positions[0]] is None:
            return None, []
        inside = set(self._sub.idx)
        if not all(i in inside for i in positions):
            return None, []
        grads = [tracker.params[i].grad for i in positions]
        return tracker.owner[positions[0]], [g for g in grads if g is not None]


class EndView:
    """The end of a watch: the optimizers that stepped and what is left in the buffers."""

    __slots__ = ("all_opts", "opts", "report", "memory", "_tracker")

    def __init__(self, tracker: Tracker, report: Report, memory: dict):
        self._tracker = tracker
        self.all_opts = list(tracker.opts.values())
        self.opts = [ost for ost in self.all_opts if ost.steps > 0]  # those that stepped
        self.report, self.memory = report, memory

    def unapplied(self, ost: OptState) -> List[Tuple[Pass, List[torch.Tensor]]]:
        """Passes that no step used whose gradient still waits in ``ost``'s parameters, with those parameters."""
        tracker = self._tracker
        sub = tracker.of(ost)
        out = []
        for ps in tracker.passes:
            if ps.used:
                continue
            waits = tracker.waiting(ps, sub)
            if any(waits):
                out.append((ps, list(compress(ost.params, waits))))
        return out

    def never_stepped(self) -> List[OptState]:
        """Optimizers still alive that never stepped while their parameters hold gradient of passes no step used.

        The watch learns of an optimizer when it steps or clears; one that did
        neither is looked for among the live objects, once, and only when such
        gradient waits in parameters no stepping optimizer holds.
        """
        tracker = self._tracker
        everything = tracker.everything()
        waiting = set()
        for ps in tracker.passes:
            if not ps.used:
                waiting.update(i for i, w in enumerate(tracker.waiting(ps, everything)) if w)
        unowned = [i for i in waiting if tracker.owner[i] is None or tracker.owner[i].steps == 0]
        if not unowned:
            return []
        waiting_params = {id(tracker.params[i]) for i in unowned}  # before registering reorders the columns
        if any(tracker.owner[i] is None for i in unowned):
            import gc

            known = {id(ost.opt) for ost in self.all_opts}
            for obj in gc.get_objects():
                if issubclass(type(obj), torch.optim.Optimizer) and id(obj) not in known:
                    held = (id(p) for group in obj.param_groups for p in group["params"])
                    if not waiting_params.isdisjoint(held):
                        tracker.opt_state(obj)  # registered now: its parameters get their columns' owner
        return [ost for ost in tracker.opts.values() if ost.steps == 0 and not ost.ids.isdisjoint(waiting_params)]

    def orphans(self) -> List[Tuple[torch.Tensor, Site]]:
        """Parameters that received gradient from a watched pass and that no optimizer holds, with that pass's line."""
        tracker = self._tracker
        held = set()
        for ost in self.all_opts:
            held |= ost.ids
        return [(tracker.params[i], site) for i, site in tracker.first_site.items() if id(tracker.params[i]) not in held]


class DiscardView:
    """A clearing at ``site`` took the last gradient of pass ``ps``, which no step used.

    ``ost``: the optimizer holding the parameters; ``params``: those the pass reached.
    """

    __slots__ = ("ps", "ost", "site", "params", "report", "memory")

    def __init__(self, ps: Pass, ost: OptState, site: Optional[Site], params: list, report: Report, memory: dict):
        self.ps, self.ost, self.site, self.params, self.report, self.memory = ps, ost, site, params, report, memory
