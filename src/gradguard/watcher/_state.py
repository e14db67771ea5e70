"""The bookkeeping of the watch: backward passes, gradient buffers, optimizers.

The watch never reads gradient values. It tells what happened to a ``.grad``
buffer between two events it sees (a backward pass, a ``zero_grad``, an
optimizer step) from the buffer's identity and its ``._version`` counter,
which every in-place operation bumps:

* ``.grad`` became ``None``, or is another tensor: the buffer was cleared
  (``zero_grad(set_to_none=True)``, ``p.grad = None``);
* same tensor, same version: untouched;
* same tensor, new version: modified in place. Inside a ``zero_grad`` the watch
  saw, that is a zero-fill. Elsewhere it is a clear (``p.grad.zero_()``) when
  the buffer held only gradient a step had already applied, and a scaling
  (clipping, ``GradScaler.unscale_``, the Accumulator's normalisation) when it
  held gradient still waiting for a step.
"""

from __future__ import annotations

import weakref
from typing import List, Optional

import torch

from ._graph import LossInfo
from ._source import Site


class Pass:
    """One backward pass: where it was called, what its loss was, where it went.

    ``live`` counts the parameters whose buffer still holds this pass's
    gradient waiting for a step; ``used`` turns True when any optimizer step
    applied any of it.
    """

    __slots__ = ("index", "site", "info", "managed", "counted", "used", "live", "reported", "params", "retained", "pver")

    def __init__(self, index: int, site: Site, info: LossInfo, managed: bool, used: bool = False, counted: bool = True):
        self.index = index
        self.site = site
        self.info = info
        self.managed = managed  # made inside the Accumulator's backward (its loss weighted by it)
        self.counted = counted  # ... with item counts (exact weights); False: count=None, equal weights
        self.used = used
        self.live = 0
        self.reported = False  # its discarding was already judged (GG102)
        self.params: List["ParamState"] = []  # the parameters it reached, for the findings' names
        self.retained = False  # backward(retain_graph=True): its graph is shared with another pass
        # (parameter, its _version) for the first few parameters reached, right after the
        # pass: a parameter modified in place before the gradient is cleared means the
        # gradient was used by hand (SAM's perturbation, a hand-written update).
        self.pver: tuple = ()

    def moved(self) -> bool:
        """Some parameter it reached was modified in place since the pass (not by a watched step)."""
        return any(p._version != v for p, v in self.pver)


# GG102 is reported for a clearing line only when it discarded gradient in this many
# consecutive optimizer-step intervals, from its first discard on (see DiscardLine).
DISCARD_RUN = 3


class DiscardLine:
    """What one clearing line (or, for a clearing by hand, one backward line) did to one optimizer's gradients.

    The step intervals of an optimizer are numbered by its completed steps: interval
    ``j`` runs from step ``j`` to step ``j + 1``. ``first``/``last``: the intervals of
    the line's first and latest discard; ``sources``: the backward lines whose passes
    it discarded in interval ``last``; ``run``: how many consecutive intervals, from
    ``first`` on, closed with a step that confirmed the discard (it had no gradient at
    all, or was fed by one of ``sources``); ``confirmed``: the last such interval.
    ``banned``: an interval since ``first`` had no discard from this line, or closed
    with a step fed only by other backward lines: the line discards on purpose
    (a skipped update, SAM's first pass) and is never reported.
    """

    __slots__ = ("first", "last", "sources", "run", "confirmed", "banned")

    def __init__(self, j: int):
        self.first = j
        self.last = j
        self.sources: set = set()
        self.run = 0
        self.confirmed = -1
        self.banned = False


# A buffer that kept growing without any step or clearing (a parameter that no
# optimizer holds) would keep every pass alive; past this many entries only the
# passes that matter for a finding (not yet used by any step) are kept.
MAX_PENDING = 32


class ParamState:
    """What the watch knows about one parameter's ``.grad`` buffer."""

    __slots__ = ("p", "ref", "ver", "pending", "consumed", "zero", "got", "first_site", "opt")

    def __init__(self, p: torch.Tensor):
        self.p = p
        self.ref: Optional[weakref.ref] = None  # the buffer last seen (weakly: never keep a cleared grad alive)
        self.ver = 0  # its _version when last seen
        self.pending: List[Pass] = []  # passes whose gradient is in the buffer, not yet applied by a step
        self.consumed = False  # the buffer holds gradient that a step already applied
        self.zero = False  # the buffer was zero-filled by a zero_grad the watch saw, nothing added since
        self.got = False  # some watched backward pass reached this parameter
        self.first_site: Site = (None, None)
        self.opt = None  # the first watched optimizer that holds it (an OptState)

    def remember(self, g: Optional[torch.Tensor]) -> None:
        """Record the buffer as it is now."""
        if g is None:
            self.ref = None
        else:
            if self.ref is None or self.ref() is not g:
                self.ref = weakref.ref(g)
            self.ver = g._version


class OptState:
    """A watched optimizer: its parameters' states and its step count."""

    __slots__ = ("opt", "params", "ids", "sig", "steps", "clock", "moves_zero", "closure", "name", "discard_at", "open_lines", "fed")

    def __init__(self, opt: torch.optim.Optimizer):
        self.opt = opt
        self.params: List[ParamState] = []
        self.ids: frozenset = frozenset()
        self.sig = None
        self.steps = 0  # steps completed inside the watch
        self.clock = 0  # the watch's clock at its last step
        self.moves_zero = False
        self.closure = False
        self.name = type(opt).__name__
        self.discard_at = -1  # the step interval of the latest discard of its parameters' gradient
        self.open_lines: List[DiscardLine] = []  # lines that discarded in the current interval
        self.fed: Optional[dict] = None  # {index: Pass} feeding the step in progress (set by its checks)


def optimizer_moves_zero_grads(opt: torch.optim.Optimizer) -> bool:
    """True if a zero (not None) gradient still moves parameters: momentum, Adam-style betas, weight decay."""
    for group in opt.param_groups:
        if group.get("momentum", 0) or group.get("weight_decay", 0) or "betas" in group:
            return True
    return False
