"""What the rules read: a view of one step, one backward pass, one clearing, or the end of a watch.

The session builds a view at each event from the tracker's records; the rules
(``rules/``) read only views and report through them, so that a rule knows
nothing of how the buffers are tracked.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ..findings import short_path
from ._source import Site
from ._tracker import OptState, ParamState, Pass

Report = Callable[[str, str, Site, Optional[int], Sequence], None]


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

    ``with_grad``: its parameters whose buffer holds gradient; ``stale``: those
    holding gradient an earlier step already applied; ``graph``: those whose
    ``.grad`` requires grad; ``zero_only``: zero-filled by ``zero_grad`` with
    nothing since; ``passes``: the backward passes whose gradient it applies
    (by index); ``discarded``: its gradient was cleared unused in this interval.
    """

    __slots__ = ("opt", "name", "n", "site", "params", "moves_zero", "with_grad", "stale", "graph",
                 "zero_only", "passes", "discarded", "report", "batch_stats", "defer")

    def __init__(self, ost: OptState, site: Site, report: Report,
                 batch_stats: Callable[[OptState], List[torch.nn.Module]], defer: Callable[[tuple], None]):
        self.opt = ost.opt
        self.name = ost.name
        self.n = ost.steps + 1
        self.site = site
        self.params = ost.params
        self.moves_zero = ost.moves_zero
        self.discarded = ost.discard_at == ost.steps
        self.with_grad: List[ParamState] = []
        self.stale: List[ParamState] = []
        self.graph: List[ParamState] = []
        self.zero_only: List[ParamState] = []
        self.passes: Dict[int, Pass] = {}
        self.report = report
        self.batch_stats = lambda: batch_stats(ost)  # batch-norm layers of its model that ran since its last step
        self.defer = defer  # run a check at the end of the watch (item counts on a device)

    def windows(self) -> List[Tuple[Site, List[Pass]]]:
        """Accumulation windows: the step's passes grouped by backward line, two or more per line.

        Passes from *different* lines are different losses added on purpose (a
        GAN discriminator's real and fake terms, a multi-task loss), which is not
        accumulation; only repeated passes of the same call are micro-batches.
        Neither are passes that keep their graph (``retain_graph=True``): several
        losses of one forward pass, back-propagated one by one in a loop.
        """
        by_site: Dict[Site, List[Pass]] = {}
        for ps in self.passes.values():
            if ps.site[0] is not None:
                by_site.setdefault(ps.site, []).append(ps)
        return [(s, g) for s, g in by_site.items() if len(g) >= 2 and not any(ps.retained for ps in g)]


class PassView:
    """A backward pass about to run: ``stale`` are parameters updated by hand with their gradient still in ``.grad``."""

    __slots__ = ("site", "stale", "report")

    def __init__(self, site: Site, stale: List[ParamState], report: Report):
        self.site, self.stale, self.report = site, stale, report


class EndView:
    """The end of a watch: the optimizers that stepped and what is left in the buffers."""

    __slots__ = ("opts", "all_opts", "params", "report", "deferred")

    def __init__(self, all_opts: List[OptState], params: List[ParamState], report: Report, deferred: list):
        self.all_opts = all_opts
        self.opts = [ost for ost in all_opts if ost.steps > 0]  # those that stepped
        self.params, self.report, self.deferred = params, report, deferred


class DiscardView:
    """A clearing at ``site`` took the last gradient of pass ``ps``, which no step used.

    ``ost``: the optimizer holding the parameters; ``nonfinite``: the gradient
    cleared was not finite (checked only when a finding is near, see ``gg102``).
    """

    __slots__ = ("ps", "ost", "site", "nonfinite", "report")

    def __init__(self, ps: Pass, ost: OptState, site: Optional[Site], nonfinite: bool, report: Report):
        self.ps, self.ost, self.site, self.nonfinite, self.report = ps, ost, site, nonfinite, report
