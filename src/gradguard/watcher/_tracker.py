"""The bookkeeping of the watch: which backward pass's gradient is in which ``.grad`` buffer.

One record per backward pass, and the buffers as columns. The tracker keeps,
for every parameter it has seen (``params``, in a fixed order), a few
parallel columns: the ``.grad`` buffer last seen and its ``._version``, the pass
number since which the buffer holds no waiting gradient (``since``), the last
pass that reached it (``last``), and two flags. A :class:`Pass` records which
buffers it created or grew as one boolean mask over that order. Every event
reads the ``.grad`` list in one go and compares it with the last one with C
loops (``map(operator.is_, ...)``). A correct loop's steady state (all cleared,
all reached, all applied) sets whole columns to one value, and a column is then
held as that value alone (:class:`Column`): its events write nothing per
parameter, and what they ask of the columns ("is any gradient pending?") is one
comparison. What is left per parameter is C loops over the ``.grad`` list (read
after each pass, at each step and before a pass that may find buffers) and its
versions. Python work per parameter is left for what is rare: a buffer cleared
by hand in the middle of a window, a gradient assigned by hand, a parameter that
no optimizer holds.

The watch never reads gradient values on these paths. It tells what happened
to a buffer between two events it sees (a backward pass, a ``zero_grad``, an
optimizer step) from the buffer's identity and its ``._version`` counter, which
every in-place operation bumps:

* ``.grad`` became ``None``, or is another tensor: the buffer was cleared
  (``zero_grad(set_to_none=True)``, ``p.grad = None``, a gradient assigned by hand);
* same tensor, new version: modified in place. Inside a ``zero_grad`` the watch
  saw, that is a zero-fill. Elsewhere it is a clear (``p.grad.zero_()``) when
  the buffer held only gradient a step had already applied, and otherwise a
  scaling (clipping, ``GradScaler.unscale_``, the Accumulator's normalisation):
  the gradient is still there, still waiting for a step. Changing a gradient
  in place does not use it; only an optimizer step does.

The columns' storage is :mod:`._columns`, the records of a pass and of an optimizer
:mod:`._records`, and the few checks that do read values (a norm, with a sync, asked
only where a finding depends on it) :mod:`._by_hand`.

The buffers last seen are held by strong reference, which costs nothing while
they are still the parameters' ``.grad``: a weak reference per buffer would cost
a Python object per parameter per step (and set off CPython's cyclic collector).
The watch lets go of them before torch's own ``zero_grad(set_to_none=True)``
clears (so they are freed inside it, as without the watch); after any other
clearing the watch sees, it lets go of them as it accounts for it; a buffer cleared by hand
(``p.grad = None``) is let go at the watch's next event (the next backward pass,
step or ``zero_grad``).
"""

from __future__ import annotations

from itertools import compress, islice, repeat
from operator import and_, gt, is_, is_not, lt, ne, not_, or_
from typing import Callable, Dict, List, Optional

import torch

from ._by_hand import ByHand, _fingerprint
from ._columns import MIXED, Column, ColumnStore, Subset, _same, grads_of, pick, versions_of, where
from ._records import OptState, Pass, optimizer_moves_zero_grads
from ._source import Site


# Passes kept beyond those that still matter for a finding (not yet used by a step).
MAX_PENDING = 32

# The tracker's per-parameter columns held as one value while alike, with their value for a new tracker.
COLUMNS = (("buf", None), ("ver", -1), ("since", 0), ("last", 0), ("consumed", False), ("zero", False))


class Tracker(ColumnStore, ByHand):
    """Every parameter the watch has seen, and what its ``.grad`` holds (see the module's docstring).

    ``on_discard(ps, ost, site)`` is called when a clearing at ``site`` took the
    last gradient of a pass that no step used (``own``: the clearing is
    gradguard's own, which discards nothing).
    """

    buf = Column()  # the .grad last seen (None: none)
    ver = Column()  # its _version; -1: None
    since = Column()  # pass number from which on gradient in the buffer waits for a step
    last = Column()  # number of the last pass that reached it; 0: none
    consumed = Column()  # the buffer holds gradient that a step already applied
    zero = Column()  # zero-filled by a zero_grad the watch saw, nothing added since

    def __init__(self, on_discard: Callable[[Pass, OptState, Optional[Site]], None]):
        self.params: List[torch.Tensor] = []
        self.pos: Dict[int, int] = {}  # id(parameter) -> its position
        self.count = 0  # backward passes so far
        for name, value in COLUMNS:
            self.uniform(name, value)
        self.owner: list = []  # the first watched optimizer that holds it (an OptState), or None
        self.owned: List[bool] = []
        self.passes: List[Pass] = []  # passes whose gradient may still wait somewhere
        self.opts: Dict[int, OptState] = {}
        #: id(object) -> (object, its OptState): another object of an optimizer already watched (see opt_state)
        self.aliases: Dict[int, tuple] = {}
        self.on_discard = on_discard
        self.own = False  # the clearing being handled is gradguard's own
        self.manual: List[int] = []  # positions reached by a pass and held by no optimizer (updated by hand?)
        self.first_site: Dict[int, Site] = {}  # position held by no optimizer -> the first pass that reached it
        self.pv: Dict[int, int] = {}  # manual position -> parameter _version after the last pass reached it
        self.clip_ver: Dict[int, tuple] = {}  # position -> (id of its buffer, its _version) right after a clip
        self._print = ((), None)
        self._all: Optional[Subset] = None
        self._subsets: Dict[int, tuple] = {}
        self._had: Optional[list] = None  # let_go's mask of the buffers it let go of, until the zero_grad ends
        self._all_owned: Optional[bool] = True  # every parameter is held by a watched optimizer (None: not known)
        #: the _version of each position's ``.grad`` right after the last pass (-1: none)
        self.after_ver: List[int] = []
        self._ref: Optional[int] = None  # the position whose buffer's norm is kept after each pass
        #: (position, its buffer's _version, its norm as a 0-d tensor) right after the last pass
        self.ref_norm: Optional[tuple] = None
        #: (pass, positions, site): passes cleared unused before any optimizer held what they reached
        self.unowned: List[tuple] = []

    # ------------------------------------------------------------ who
    def add(self, p: torch.Tensor) -> int:
        """The position of ``p``, added if new (a gradient it has now: "a gradient" no watched pass made)."""
        i = self.pos.get(id(p))
        if i is not None and self.params[i] is p:
            return i
        i = self.pos[id(p)] = len(self.params)
        g = p.grad
        d = self.__dict__
        for name, value in (("buf", g), ("ver", -1 if g is None else g._version), ("since", self.count),
                            ("last", 0), ("consumed", False), ("zero", False)):
            alike = _same(d["flat_" + name], value)
            if alike and d["_" + name] is None:
                continue  # held as one value, which the new position has too
            getattr(self, name).append(value)  # (made a list first, if held as one value)
            if not alike:
                d["flat_" + name] = MIXED
        self.params.append(p)
        self.owner.append(None)
        self.owned.append(False)
        self._all = None
        self._all_owned = False
        return i

    def everything(self) -> Subset:
        if self._all is None or len(self._all.idx) != len(self.params):
            self._all = Subset(list(range(len(self.params))))
        return self._all

    def subset(self, params) -> Subset:
        """The positions of ``params`` (a module's), cached while the same tensors come in the same order."""
        params = list(params)
        key = id(params[0]) if params else 0
        hit = self._subsets.get(key)
        if hit is not None and len(hit[0]) == len(params) and all(map(is_, hit[0], params)):
            return hit[1]
        sub = Subset([self.add(p) for p in params])
        self._subsets[key] = (params, sub)
        return sub

    def opt_state(self, opt: torch.optim.Optimizer) -> OptState:
        ost = self.opts.get(id(opt))
        if ost is None or ost.opt is not opt:
            ost = self._same_optimizer(opt)
            if ost is None:
                ost = self.opts[id(opt)] = OptState(opt)
        groups = opt.param_groups
        sig = (len(groups), sum(len(g["params"]) for g in groups))
        if sig != ost.sig:  # new optimizer, or add_param_group
            ost.sig = sig
            ost.params = [p for g in groups for p in g["params"]]
            ost.ids = frozenset(map(id, ost.params))
            ost.moves_zero = optimizer_moves_zero_grads(opt)
            for p in ost.params:
                i = self.add(p)
                if self.owner[i] is None:
                    self.owner[i] = ost
                    self.owned[i] = True
            self._all_owned = None
            self._reorder()
            self.manual = [i for i in self.manual if self.owner[i] is None]
            if self.unowned:
                self._judge_unowned(ost)
        return ost

    def _same_optimizer(self, opt: torch.optim.Optimizer) -> Optional[OptState]:
        """The watched optimizer that ``opt`` is another object of, if any.

        An object that holds the very ``param_groups`` list and ``state`` dict of a watched optimizer
        (Lightning's ``LightningOptimizer`` copies the optimizer's ``__dict__``) is that optimizer: its
        ``zero_grad()`` clears the same buffers, and a step through either applies the same update from
        the same state. Counted apart, a clearing through one and the steps through the other would
        never meet (a pass cleared unused would look like one no step ever follows).
        """
        hit = self.aliases.get(id(opt))
        if hit is not None and hit[0] is opt:
            return hit[1]
        groups, state = getattr(opt, "param_groups", None), getattr(opt, "state", None)
        for ost in self.opts.values():
            if ost.opt is not opt and ost.opt.param_groups is groups and ost.opt.state is state:
                self.aliases[id(opt)] = (opt, ost)
                if isinstance(ost.opt, type(opt)):
                    ost.name = type(opt).__name__  # named by the optimizer's own class, not its wrapper's
                return ost
        return None

    def _reorder(self) -> None:
        """Give each optimizer's parameters one run of the columns, in its order: its events then read and
        write slices in C. Only when an optimizer is registered or grows."""
        order: List[int] = []
        taken = set()
        for ost in self.opts.values():
            for p in ost.params:
                i = self.pos[id(p)]
                if i not in taken:
                    taken.add(i)
                    order.append(i)
        order += [i for i in range(len(self.params)) if i not in taken]
        if order != list(range(len(order))):
            n = len(order)
            for name in ("params", "owner", "owned"):
                col = getattr(self, name)
                setattr(self, name, [col[i] for i in order])
            for name, _ in COLUMNS:  # held as one value: the same in any order
                col = self.__dict__["_" + name]
                if col is not None:
                    self.__dict__["_" + name] = [col[i] for i in order]
            new_of = {old: new for new, old in enumerate(order)}
            self.pos = {id(p): i for i, p in enumerate(self.params)}
            for ps in self.passes:
                r = ps.mask(n)
                ps.reached = [r[i] for i in order]
            self.manual = [new_of[i] for i in self.manual]
            self.first_site = {new_of[i]: s for i, s in self.first_site.items()}
            self.pv = {new_of[i]: v for i, v in self.pv.items()}
            self._print = ([new_of[i] for i in self._print[0]], self._print[1])
            self._all = None
            self._subsets = {}
        for ost in self.opts.values():
            idx = [self.pos[id(p)] for p in ost.params]
            sub = Subset(idx)
            ost.sl, ost.idx = sub.sl, sub.idx

    @staticmethod
    def of(ost: OptState) -> Subset:
        sub = Subset.__new__(Subset)
        sub.sl, sub.idx = ost.sl, ost.idx
        return sub

    # ------------------------------------------------------------ what a change means
    def sync(self, sub: Subset, site: Optional[Site] = None, zero_fill: bool = False,
             grads: Optional[list] = None, refresh: bool = False) -> None:
        """Account for every change to ``sub``'s buffers since they were last seen (``site``: a clearing's line).

        ``grads``: their ``.grad`` as the caller read it. ``zero_fill``: inside a
        ``zero_grad`` the watch saw (a change in place is its zero-fill).
        ``refresh``: then note every buffer's version as it is (before a backward
        pass, which tells the buffers it grew by their versions).
        """
        if grads is None:
            grads = grads_of(sub.get(self.params))
        if self.flat_buf is None:
            if not any(map(is_not, grads, repeat(None))):
                # No buffer before nor now (between a zero_grad(set_to_none=True) and the next pass):
                # nothing happened, and the columns already say so (buffer None, version -1).
                return
            last = [None] * len(grads)
        else:
            last = sub.get(self.buf)
        vers = self._sync(sub, site, zero_fill, grads, last)
        if refresh:
            self._put("buf", sub, grads)
            self._put("ver", sub, vers if vers is not None else versions_of(grads))

    def _sync(self, sub: Subset, site: Optional[Site], zero_fill: bool, grads: list, last: list) -> Optional[list]:
        """``last``: the buffers as last seen (``sub.get(self.buf)``, read once by the caller). Returns the
        versions of ``grads`` when it read them."""
        new = list(map(is_not, grads, last))
        # A buffer still there, changed in place: it matters only inside a zero_grad, for a
        # buffer holding only applied gradient (a p.grad.zero_() by hand), or to end a zero-fill.
        inplace: List[int] = []
        if zero_fill:
            if not any(map(is_not, grads, repeat(None))):  # zero_grad(set_to_none=True): every buffer is gone,
                if any(new):  # nothing changed in place
                    self._cleared_all(sub, site)
                return None
            look = list(map(is_not, grads, repeat(None)))
        else:
            look = None
            if self.flat_consumed is not False or self.flat_zero is not False:
                consumed, zero = sub.get(self.consumed), sub.get(self.zero)
                if any(consumed) or any(zero):
                    pending = map(gt, sub.get(self.last), sub.get(self.since))
                    look = list(map(or_, map(and_, consumed, map(not_, pending)), zero))
        vers = None
        if look is not None and any(look):
            vers = versions_of(grads)
            inplace = where(list(map(and_, map(and_, look, map(ne, vers, sub.get(self.ver))), map(not_, new))))
            if inplace and not zero_fill and self.flat_zero is not False:
                inplace = self.still_zero(sub, grads, inplace)
            if zero_fill and len(inplace) == len(grads) and not self._open_before():
                # zero_grad(set_to_none=False) in a correct loop's steady state: every buffer zero-filled in
                # place, no gradient discarded; one clearing, in columns. (With gradient still waiting, buffer
                # by buffer below: which pass dies at which buffer, and whose optimizer it was, is decided there.)
                self._zero_filled_all(sub, vers)
                return vers
        if not inplace:
            if not any(new):
                return vers
            if not any(map(is_not, grads, repeat(None))):
                self._cleared_all(sub, site)  # everything set to None: one clearing, in columns
                return vers
        moved = where(new)
        idx = sub.idx
        for j in moved:
            self._observe(idx[j], grads[j], site, False)
        rescaled = () if zero_fill else self._rescaled_spent(idx, grads, inplace)
        for j in inplace:
            self._observe(idx[j], grads[j], site, zero_fill, j in rescaled)
        return vers

    def _rescaled_spent(self, idx: list, grads: list, inplace: List[int]) -> set:
        """Of ``inplace``, the buffers holding only gradient a step applied that are still not all zeros:
        rescaled in place (a clip after the step), not cleared, so a step now would apply them again. One
        foreach max-norm (a sync), only where such a buffer changed in place (a correct loop that clears by
        hand with ``p.grad.zero_()`` reads it once per clearing)."""
        spent = [j for j in inplace if grads[j] is not None and self.consumed[idx[j]] and self.last[idx[j]] <= self.since[idx[j]]]
        if not spent:
            return set()
        try:
            norms = torch._foreach_norm([grads[j] for j in spent], float("inf"))
            device = norms[0].device
            nonzero = (torch.stack([n.to(device=device, dtype=torch.float32) for n in norms]) != 0).tolist()
        except Exception:
            return set()
        return {j for j, nz in zip(spent, nonzero) if nz}

    def _observe(self, i: int, g, site: Optional[Site], zero_fill: bool, rescaled: bool = False) -> None:
        """What happened to position ``i``'s buffer, now ``g`` (``rescaled``: spent gradient changed in place
        and not zeroed, which stays spent)."""
        b = self.buf[i]
        if g is None:
            self._set_at("buf", [i], None)
            self._set_at("ver", [i], -1)
            if b is not None:
                self.clear([i], site)
            return
        if b is not g:
            if b is not None:
                self.clear([i], site)
            # A buffer that no watched pass filled (assigned by hand, or filled by a backward
            # the watch did not see): a gradient of unknown origin.
            self._set_at("buf", [i], g)
            self._set_at("ver", [i], g._version)
            return
        self._set_at("ver", [i], g._version)
        if zero_fill or (self.consumed[i] and self.last[i] <= self.since[i] and not rescaled):
            # Zero-filled by a zero_grad, or only already-applied gradient was in there: a p.grad.zero_().
            self.clear([i], site)
            self._set_at("zero", [i], zero_fill)
        else:
            self._set_at("zero", [i], False)  # scaled, clipped or unscaled in place: still waiting for a step

    def _cleared_all(self, sub: Subset, site: Optional[Site]) -> None:
        watch_for = self._open_before()
        spent = {i for i, c in zip(sub.idx, sub.get(self.consumed)) if c} if watch_for else None
        for name, value in (("buf", None), ("ver", -1), ("consumed", False), ("zero", False), ("since", self.count)):
            self._put(name, sub, None, value)
        if watch_for:
            self._judge(watch_for, sub.idx, site, spent)

    def _zero_filled_all(self, sub: Subset, vers: List[int]) -> None:
        """Every buffer of ``sub`` zero-filled in place (now at versions ``vers``), no pass's gradient waiting
        anywhere: what :meth:`_observe` would find at each, in columns."""
        self._put("ver", sub, vers)
        for name, value in (("consumed", False), ("since", self.count), ("zero", True)):
            self._put(name, sub, None, value)

    def let_go(self, sub: Subset) -> bool:
        """Before torch's own ``zero_grad(set_to_none=True)`` on ``sub``: drop the buffers last seen, so that
        they are freed where they would be without the watch, inside ``zero_grad``. True if there were any."""
        self._had = None
        if self.flat_buf is None:
            return False
        had = list(map(is_not, sub.get(self.buf), repeat(None)))
        if not any(had):
            return False
        self._had = had  # which buffers were there: if the zero_grad fails part way (see unemptied)
        self._put("buf", sub, None, None)
        return True

    def emptied(self, sub: Subset, site: Optional[Site], had: bool) -> None:
        """After torch's own ``zero_grad(set_to_none=True)``: every buffer of ``sub`` is None (``had``: from
        :meth:`let_go`). Without reading them back (one pass over the parameters fewer per step)."""
        self._had = None
        if had:
            self._cleared_all(sub, site)

    def unemptied(self, sub: Subset, site: Optional[Site]) -> None:
        """That ``zero_grad`` failed part way: the buffers still there are those let go of (a zero_grad that
        sets to None replaces none), as last seen (their versions kept, so that the next event still sees what
        was changed in place since); those now gone were cleared."""
        had, self._had = self._had, None
        grads = grads_of(sub.get(self.params))
        if had is None or len(had) != len(grads):
            had = [False] * len(grads)
        self._put("buf", sub, list(map(_keep, had, grads, repeat(None))))
        self._put("ver", sub, list(map(_keep, map(is_not, grads, repeat(None)), sub.get(self.ver), repeat(-1))))
        gone = [sub.idx[j] for j in where(list(map(and_, had, map(is_, grads, repeat(None)))))]
        if gone:
            self.clear(gone, site)

    def clear(self, positions: List[int], site: Optional[Site]) -> None:
        """The buffers at ``positions`` were emptied: passes whose last waiting gradient this was are discarded."""
        watch_for = self._open_before()
        spent = {i for i in positions if self.consumed[i]} if watch_for else None
        self._set_at("consumed", positions, False)
        self._set_at("zero", positions, False)
        self._set_at("since", positions, self.count)
        if watch_for:
            self._judge(watch_for, positions, site, spent)

    def _judge_unowned(self, ost: OptState) -> None:
        """``ost`` was just registered (at its first step or zero_grad): passes cleared unused before it held
        their parameters were discarded in its first interval (a clearing before every backward pass, from
        the first micro-batch on, when the optimizer is seen only at its first step)."""
        left = []
        for ps, params, site in self.unowned:
            if ps.used or ps.judged:
                continue
            if any(id(p) in ost.ids for p in params):  # (by identity: positions move in _reorder)
                ps.judged = True
                self.on_discard(ps, ost, site)
            else:
                left.append((ps, params, site))
        self.unowned = left

    def all_owned(self) -> bool:
        if self._all_owned is None:
            self._all_owned = all(self.owned)
        return self._all_owned

    def _open_before(self) -> List[Pass]:
        """The passes no step used whose gradient still waits somewhere (before a clearing)."""
        if not self.passes:
            return []
        return [ps for ps in self.passes if not ps.used and not ps.judged and self.live(ps)]

    def _judge(self, passes: List[Pass], cleared: List[int], site: Optional[Site], spent: Optional[set] = None) -> None:
        """Of ``passes`` (waiting before the clearing of ``cleared``), those now gone without a step.
        ``spent``: the cleared positions that also held gradient a step had applied (:attr:`Pass.on_applied`)."""
        for ps in passes:
            if self.live(ps):
                continue
            mask = ps.reached
            hit = [i for i in cleared if i < len(mask) and mask[i] and self.owner[i] is not None]
            if not hit:
                # only parameters no optimizer holds (yet): "used by a step" means nothing there, unless an
                # optimizer that holds them shows up later (registered at its first step): judged then
                if not self.own and not ps.info.amp and len(self.unowned) < MAX_PENDING:
                    self.unowned.append((ps, [self.params[i] for i in cleared if i < len(mask) and mask[i]][:4], site))
                continue
            if self.own or ps.info.amp:
                # gradguard's own clearing discards nothing; a GradScaler skips the step on
                # inf/NaN unseen (it only calls step() or not), so its passes are never judged.
                continue
            ps.judged = True
            ps.on_applied = bool(spent) and all(i in spent for i in hit)
            self.on_discard(ps, self.owner[hit[0]], site)

    def live(self, ps: Pass) -> bool:
        """Some buffer still holds ``ps``'s gradient waiting for a step."""
        r = ps.reached
        if not any(r):
            return False
        if self.flat_since is not MIXED:
            return self.flat_since < ps.index
        since = self.since
        if len(r) < len(since):
            since = since[: len(r)]
        return any(map(and_, r, map(lt, since, repeat(ps.index))))

    def waiting(self, ps: Pass, sub: Subset) -> list:
        """Mask over ``sub``: where ``ps``'s gradient still waits for a step."""
        r = sub.get(ps.mask(len(self.params)))
        if self.flat_since is not MIXED:
            return r if self.flat_since < ps.index else [False] * len(r)
        return list(map(and_, r, map(lt, sub.get(self.since), repeat(ps.index))))

    # ------------------------------------------------------------ events
    def arrived(self, ps: Pass) -> None:
        """After a pass: every buffer that changed during it holds (also) its gradient."""
        params = self.params
        grads = grads_of(params)
        before = None if self.flat_buf is None else self.buf
        if before is not None and any(map(is_not, before, repeat(None))):
            # Some buffers were there before the pass: grown in place is told by the version.
            vers = versions_of(grads)
            reached = list(map(and_, map(or_, map(is_not, grads, before), map(ne, vers, self.ver)),
                               map(is_not, grads, repeat(None))))
            self.buf = grads
            self.ver = vers
        else:
            # All made by this pass (the steady state after zero_grad(set_to_none=True)): no version
            # to compare. Their versions are read when it matters: before the next pass (a refresh)
            # and when a step applies them; until then they wait for a step, where a change in
            # place tells nothing.
            reached = list(map(is_not, grads, repeat(None)))
            if before is not None or any(reached):
                self.buf = grads
                self.uniform("ver", -1)
        ps.reached = reached
        if not any(reached):
            return
        for q in reversed(self.passes):
            if q.pver and not q.used and q.moved() and self.live(q):
                ps.after_moved = q.index
                break
        # what the pass left in each buffer, to tell at the step whether the user's code changed it
        # in place since (p.grad.zero_(), fill_(0), mul_(0): a clearing; p.grad /= K: a weight)
        # (one C loop; the buffers themselves are the ``buf`` column, which zero_grad lets go of)
        self.after_ver = versions_of(grads)
        # the norm of the smallest buffer the pass reached, as the pass left it (one small kernel, no
        # sync): a rescaling of .grad before the step (p.grad /= K) is then measured against it
        ref = self._ref if self._ref is not None and self._ref < len(reached) and reached[self._ref] else None
        if ref is None:
            ref = self._ref = min(where(reached), key=lambda i: grads[i].numel())
        g = grads[ref]
        try:
            self.ref_norm = (ref, g._version, torch.linalg.vector_norm(g.detach().float()))
        except Exception:
            self.ref_norm = None
        self.passes.append(ps)
        if len(self.passes) > 2 * MAX_PENDING:
            # A loop that never steps (updates by hand) or a buffer no step ever applies:
            # keep what can still matter, and a bounded number of those.
            self.passes = [q for q in self.passes if self.live(q)][-4 * MAX_PENDING:]
        if all(reached):  # the steady state: every parameter's last pass is this one
            self.uniform("last", ps.index)
        else:
            self.last = pick(reached, self.last, ps.index)
        if self.flat_zero is not False:
            zero = list(map(and_, self.zero, map(not_, reached)))
            if any(zero):
                self.zero = zero
            else:
                self.uniform("zero", False)
        if not self.all_owned() and not all(map(or_, self.owned, map(not_, reached))):
            # it reached parameters no optimizer holds
            for i in where(list(map(and_, reached, map(not_, self.owned)))):
                if i not in self.first_site:
                    self.first_site[i] = ps.site
                    self.manual.append(i)
        if not ps.used:
            ps.pver = tuple((p, p._version) for p in islice(compress(params, reached), 4))
        if self.manual:
            for i in self.manual:
                if reached[i]:
                    self.pv[i] = params[i]._version
            # ``p.data.add_(...)`` leaves no trace in p's version counter (``.data`` has its
            # own): a fingerprint of the values (one foreach norm, no sync) tells instead.
            # Only for parameters no optimizer holds, which loops that update by hand have.
            self._print = (list(self.manual), _fingerprint([params[i] for i in self.manual]))

    def step_view(self, ost: OptState, grads: list):
        """For ``ost``'s step about to read ``grads``: masks over its parameters (with gradient, stale,
        zero-filled only), whether gradient no watched pass made is among them, and the passes it applies."""
        sub = self.of(ost)
        has = list(map(is_not, grads, repeat(None)))
        n = len(has)
        pending, every = self._pending(sub, n)
        zero = sub.get(self.zero) if self.flat_zero is not False else None
        if zero is not None and any(zero):
            zero_only = list(map(and_, map(and_, has, map(not_, pending)), zero))
            with_grad = list(map(and_, has, map(not_, zero_only)))
        else:
            zero_only, with_grad = [False] * n, has
        consumed = self.flat_consumed
        consumed = [consumed] * n if consumed is not MIXED else sub.get(self.consumed)
        stale = list(map(and_, with_grad, consumed)) if any(consumed) else [False] * n
        by_hand = not every and any(map(and_, map(and_, with_grad, map(not_, pending)), map(not_, consumed)))
        fed = {}
        if every or any(pending):
            flat = self.flat_since
            since = sub.get(self.since) if flat is MIXED else None
            low = flat if flat is not MIXED else (min(since) if since else 0)
            n_all = len(self.params)
            for ps in self.passes:
                if ps.index <= low:
                    continue
                r = sub.get(ps.mask(n_all))
                if flat is not MIXED:  # every buffer's waiting gradient is from after ``flat``
                    waits = any(r)
                else:
                    waits = any(map(and_, r, map(lt, since, repeat(ps.index))))
                if waits:
                    fed[ps.index] = ps
        return with_grad, stale, zero_only, by_hand, fed

    def _pending(self, sub: Subset, n: int):
        """Mask over ``sub``: buffers holding gradient that waits for a step; and True if that is all of them."""
        if self.flat_since is not MIXED and self.flat_last is not MIXED:  # one value in each column: one comparison
            every = self.flat_last > self.flat_since
            return [every] * n, every
        pending = list(map(gt, sub.get(self.last), sub.get(self.since)))
        return pending, all(pending)

    def applied(self, ost: OptState, with_grad: list, grads: Optional[list] = None) -> None:
        """After ``ost``'s step: the gradient in the buffers marked ``with_grad`` has been applied.

        ``grads``: the ``.grad`` list as the step's check read it (a step reads them, it does not replace them).
        """
        sub = self.of(ost)
        if grads is None:
            grads = grads_of(sub.get(self.params))
        has = list(map(is_not, grads, repeat(None)))
        wg = list(map(and_, with_grad, has))
        n = len(wg)
        pending, every = self._pending(sub, n)
        applied_all = all(wg)
        if applied_all and every:
            # The steady state of a correct loop: every buffer held waiting gradient and the
            # step applied all of it; whole columns at once.
            self._put("consumed", sub, None, True)
            self._put("since", sub, None, self.count)
            self._put("buf", sub, grads)
            self._put("ver", sub, versions_of(grads))
            self._trim()
            return
        # (a gradient of unknown origin, too, is now applied; a zero-fill with nothing since is not a gradient)
        if self.flat_zero is not False:
            now = list(map(and_, wg, map(or_, pending, map(not_, sub.get(self.zero)))))
        else:
            now = wg
        if any(now):
            self._put("consumed", sub, list(map(or_, sub.get(self.consumed), now)))
        self._put("since", sub, pick(wg, sub.get(self.since), self.count), self.count if applied_all else MIXED)
        # Where the buffer is gone now (a step that clears), forget it as it was.
        self._put("buf", sub, list(map(_keep, wg, grads, sub.get(self.buf))) if not all(map(is_, wg, has)) else grads)
        self._put("ver", sub, versions_of(sub.get(self.buf)))
        self._trim()

    def _trim(self) -> None:
        """Forget passes whose gradient waits nowhere and that a step used (their findings are decided)."""
        passes = self.passes
        if not passes:
            return
        if self.flat_since is not MIXED:
            low = self.flat_since
        else:
            low = min(self.since) if self.since else 0
        keep = [ps for ps in passes if not ps.used or (ps.index > low and self.live(ps))]
        if len(keep) > 4 * MAX_PENDING:
            keep = [ps for ps in keep if not ps.used][-4 * MAX_PENDING:] or keep[-MAX_PENDING:]
        self.passes = keep

    def open_passes(self) -> List[Pass]:
        """Passes that no step used and whose gradient still waits somewhere."""
        return [ps for ps in self.passes if not ps.used and not ps.judged and self.live(ps)]

    def forget(self, positions: List[int]) -> None:
        """Judged once (a hand-written update): what follows is the next pass's."""
        self._set_at("consumed", positions, False)
        self._set_at("zero", positions, False)
        self._set_at("since", positions, self.count)


def _keep(take: bool, g, old):
    return g if take else old


