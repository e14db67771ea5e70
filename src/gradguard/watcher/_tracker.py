"""The bookkeeping of the watch: which backward pass's gradient is in which ``.grad`` buffer.

The watch never reads gradient values on its regular paths. It tells what
happened to a ``.grad`` buffer between two events it sees (a backward pass, a
``zero_grad``, an optimizer step) from the buffer's identity and its
``._version`` counter, which every in-place operation bumps. :meth:`Tracker.changed`
is that one test; :meth:`Tracker.observe` says what a change means:

* ``.grad`` became ``None``, or is another tensor: the buffer was cleared
  (``zero_grad(set_to_none=True)``, ``p.grad = None``, a gradient assigned by hand);
* same tensor, new version: modified in place. Inside a ``zero_grad`` the watch
  saw, that is a zero-fill. Elsewhere it is a clear (``p.grad.zero_()``) when
  the buffer held only gradient a step had already applied, and otherwise a
  scaling (clipping, ``GradScaler.unscale_``, the Accumulator's normalisation):
  the gradient is still there, still waiting for a step. Changing a gradient
  in place does not use it; only an optimizer step does.
"""

from __future__ import annotations

import weakref
from typing import Callable, Dict, List, Optional

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
        self.managed = managed  # weighted by gradguard itself (the Accumulator, accumulate_batch)
        self.counted = counted  # ... with item counts (exact weights); False: count=None, equal weights
        self.used = used
        self.live = 0
        self.reported = False  # its discarding was already judged (GG102)
        self.params: List["ParamState"] = []  # the parameters it reached
        self.retained = False  # backward(retain_graph=True): its graph is shared with another pass
        # (parameter, its _version) for the first few parameters reached, right after the
        # pass: a parameter modified in place before the gradient is cleared means the
        # gradient was used by hand (SAM's perturbation, a hand-written update).
        self.pver: tuple = ()

    def moved(self) -> bool:
        """Some parameter it reached was modified in place since the pass (not by a watched step)."""
        return any(p._version != v for p, v in self.pver)


# A buffer that kept growing without any step or clearing (a parameter that no
# optimizer holds) would keep every pass alive; past this many entries only the
# passes that matter for a finding (not yet used by any step) are kept.
MAX_PENDING = 32


class ParamState:
    """What the watch knows about one parameter's ``.grad`` buffer."""

    __slots__ = ("p", "ref", "ver", "pending", "consumed", "zero", "got", "first_site", "opt", "pv")

    def __init__(self, p: torch.Tensor):
        self.p = p
        # The buffer last seen (weakly: never keep a cleared grad alive) and its _version;
        # ver -1: it was None. A buffer seen cleared keeps its (dead) weak reference until the
        # next buffer's replaces it: freeing one as the other is made leaves CPython's cyclic
        # GC count unchanged, where freeing 10,000 first and making 10,000 later sets off
        # collections that walk every tensor (the many-tensor case).
        self.ref: Optional[weakref.ref] = None
        self.ver = -1
        # Passes whose gradient is in the buffer, not yet applied by a step. One list per
        # parameter for good (cleared, not replaced): a new list per parameter per event
        # sets off CPython's cyclic GC every few hundred parameters, and each collection
        # walks the fresh .grad tensors (13 ms instead of 1 ms per pass at 2000 tensors).
        self.pending: List[Pass] = []
        self.consumed = False  # the buffer holds gradient that a step already applied
        self.zero = False  # the buffer was zero-filled by a zero_grad the watch saw, nothing added since
        self.got = False  # some watched backward pass reached this parameter
        self.first_site: Site = (None, None)
        self.opt = None  # the first watched optimizer that holds it (an OptState)
        self.pv = -1  # no optimizer holds it: the parameter's _version after the last pass reached it

    def remember(self, g: Optional[torch.Tensor]) -> None:
        """Record the buffer as it is now."""
        if g is None:
            self.ver = -1
        else:
            if self.ref is None or self.ref() is not g:
                self.ref = weakref.ref(g)
            self.ver = g._version


class OptState:
    """A watched optimizer: its parameters' states and its step count."""

    __slots__ = ("opt", "params", "ids", "sig", "steps", "clock", "moves_zero", "closure", "name", "discard_at", "open_lines")

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
        self.open_lines: list = []  # GG102: lines that discarded in the current interval


def optimizer_moves_zero_grads(opt: torch.optim.Optimizer) -> bool:
    """True if a zero (not None) gradient still moves parameters: momentum, Adam-style betas, weight decay."""
    for group in opt.param_groups:
        if group.get("momentum", 0) or group.get("weight_decay", 0) or "betas" in group:
            return True
    return False


class Tracker:
    """Every parameter the watch has seen, and what its ``.grad`` holds.

    ``on_discard(ps, st, site)`` is called when a clearing at ``site`` took the
    last gradient of a pass that no step used (``own``: the clearing is
    gradguard's own, which discards nothing).
    """

    def __init__(self, on_discard: Callable[[Pass, ParamState, Optional[Site]], None]):
        self.params: Dict[int, ParamState] = {}
        self._tracked: List[ParamState] = []
        self._dirty = False
        self.opts: Dict[int, OptState] = {}
        self.on_discard = on_discard
        self.own = False  # the clearing being handled is gradguard's own
        self.manual: List[ParamState] = []  # reached by a pass, held by no optimizer (updated by hand?)

    # ------------------------------------------------------------ who
    def state(self, p: torch.Tensor) -> ParamState:
        st = self.params.get(id(p))
        if st is None:
            st = self.params[id(p)] = ParamState(p)
            self._dirty = True
            # A gradient from before the watch or from an unseen source: it is
            # "a gradient", but no watched pass made it.
            st.remember(p.grad)
        return st

    def tracked(self) -> List[ParamState]:
        if self._dirty:
            self._tracked = list(self.params.values())
            self._dirty = False
        return self._tracked

    def opt_state(self, opt: torch.optim.Optimizer) -> OptState:
        ost = self.opts.get(id(opt))
        if ost is None or ost.opt is not opt:
            ost = self.opts[id(opt)] = OptState(opt)
        groups = opt.param_groups
        sig = (len(groups), sum(len(g["params"]) for g in groups))
        if sig != ost.sig:  # new optimizer, or add_param_group
            ost.sig = sig
            ost.params = [self.state(p) for g in groups for p in g["params"]]
            ost.ids = frozenset(id(st.p) for st in ost.params)
            ost.moves_zero = optimizer_moves_zero_grads(opt)
            for st in ost.params:
                if st.opt is None:
                    st.opt = ost
            self.manual = [st for st in self.manual if st.opt is None]
        return ost

    # ------------------------------------------------------------ the one test
    @staticmethod
    def changed(states: List[ParamState], grads: Optional[list] = None) -> List[int]:
        """The indices of ``states`` whose ``.grad`` is not the buffer last seen, or was changed in place since.

        ``grads``: their ``.grad`` as the caller read it (each read costs, with many tensors).
        The identity goes first: a new buffer is told without reading its ``_version``.
        """
        if grads is None:
            grads = [st.p.grad for st in states]
        out = []
        add = out.append
        i = -1
        for st, g in zip(states, grads):
            i += 1
            if g is None:
                if st.ver < 0:
                    continue
            elif st.ver >= 0 and st.ref() is g and g._version == st.ver:
                continue
            add(i)
        return out

    # ------------------------------------------------------------ what a change means
    def sync(self, states: List[ParamState], site: Optional[Site] = None, zero_fill: bool = False,
             grads: Optional[list] = None) -> None:
        """Account for every change to ``states``' buffers since they were last seen (``grads``: see ``changed``)."""
        if grads is None:
            grads = [st.p.grad for st in states]
        for i in self.changed(states, grads):
            st = states[i]
            if not st.pending and grads[i] is None:  # the common clearing, inline: nothing to discard
                st.ver = -1
                st.consumed = st.zero = False
            else:
                self.observe(st, site, zero_fill)

    def observe(self, st: ParamState, site: Optional[Site] = None, zero_fill: bool = False) -> None:
        """Account for what happened to ``st``'s buffer since it was last seen (``site``: a clearing's line)."""
        g = st.p.grad
        if g is None:
            if st.ver >= 0:
                st.ver = -1
                self.cleared(st, site)
            return
        if st.ver < 0 or st.ref() is not g:
            if st.ver >= 0:
                self.cleared(st, site)
            # A buffer that no watched pass filled (assigned by hand, or filled
            # by a backward the watch did not see): a gradient of unknown origin.
            st.remember(g)
            return
        if g._version != st.ver:
            st.ver = g._version
            if zero_fill or (st.consumed and not st.pending):
                # Zero-filled by a zero_grad, or only already-applied gradient was in
                # there: a p.grad.zero_().
                self.cleared(st, site)
                st.zero = zero_fill
            else:
                st.zero = False  # scaled, clipped or unscaled in place: still waiting for a step

    def cleared(self, st: ParamState, site: Optional[Site]) -> None:
        """The buffer was emptied: passes whose last pending gradient this was are discarded."""
        st.consumed = False
        st.zero = False
        pending = st.pending
        if not pending:
            return
        if st.opt is None:
            # No optimizer holds this parameter (manual SGD reads .grad itself):
            # "used by a step" has no meaning, so neither has "discarded".
            for ps in pending:
                ps.live -= 1
            pending.clear()
            return
        own = self.own
        for ps in pending:
            ps.live -= 1
            if ps.live <= 0 and not ps.used and not ps.reported and not own and not ps.info.amp:
                # A GradScaler skips the step on inf/NaN (unseen: it only calls step() or
                # not), so its passes are never judged.
                ps.reported = True
                self.on_discard(ps, st, site)
        pending.clear()

    # ------------------------------------------------------------ events
    def arrived(self, ps: Pass, tracked: List[ParamState]) -> None:
        """After a pass: every buffer that changed during it holds (also) its gradient."""
        reached = ps.params
        add = reached.append
        new_ref = weakref.ref
        grads = [st.p.grad for st in tracked]
        for i in self.changed(tracked, grads):
            st = tracked[i]
            g = grads[i]
            if g is None:
                st.ver = -1
                continue
            ref = st.ref
            if ref is None or ref() is not g:
                st.ref = new_ref(g)  # frees the old one (see ParamState)
            st.ver = g._version
            pending = st.pending
            if len(pending) >= MAX_PENDING:
                pending[:] = [q for q in pending if not q.used]
            pending.append(ps)
            add(st)
            st.zero = False
            if not st.got:
                st.got = True
                st.first_site = ps.site
                if st.opt is None:
                    self.manual.append(st)
        ps.live = len(reached)
        if reached and not ps.used:
            ps.pver = tuple((q.p, q.p._version) for q in reached[:4])
        if self.manual:
            for st in self.manual:
                if st.pending and st.pending[-1] is ps:
                    st.pv = st.p._version
            # ``p.data.add_(...)`` leaves no trace in p's version counter (``.data`` has its
            # own): a fingerprint of the values (one foreach norm, no sync) tells instead.
            # Only for parameters no optimizer holds, which loops that update by hand have.
            self._print = (list(self.manual), _fingerprint(self.manual))

    def applied(self, ost: OptState, with_grad: List[ParamState]) -> None:
        """After ``ost``'s step: the gradient in ``with_grad``'s buffers has been applied."""
        for st in with_grad:
            g = st.p.grad
            if g is None:
                st.ver = -1
                continue
            if st.pending or not st.zero:
                st.consumed = True  # (a gradient of unknown origin, too, is now applied)
            st.pending.clear()
            ref = st.ref
            if ref is None or ref() is not g:
                st.ref = weakref.ref(g)
            st.ver = g._version

    def moved_by_hand(self) -> List[ParamState]:
        """Parameters held by no optimizer, changed in place since the last pass reached them,
        whose ``.grad`` still holds that pass's gradient (an update by hand with no clearing)."""
        states, before = getattr(self, "_print", ((), None))
        if not states or not any(st.pending for st in states):
            return []
        now = _fingerprint(states)
        values = (now != before).tolist() if now is not None and before is not None else [False] * len(states)
        out = []
        for st, moved in zip(states, values):
            if st.pending and st.pv >= 0 and (moved or st.p._version != st.pv) and st.p.grad is not None:
                out.append(st)
        return out


def _fingerprint(states: List[ParamState]) -> Optional[torch.Tensor]:
    try:
        norms = torch._foreach_norm([st.p.detach() for st in states])
        return torch.stack([n.to(device=norms[0].device, dtype=torch.float32) for n in norms])
    except Exception:
        return None
