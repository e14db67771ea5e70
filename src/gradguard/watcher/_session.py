"""One active watch: the events it receives (from ``_hooks``), in order, on its thread.

At each event the session brings the tracker up to date, builds the view the
rules read, runs them, and has the reporter emit what they found. The work per
event is one pass over the parameters concerned reading ``p.grad`` and its
``_version``: no gradient values, no device syncs. The exceptions are rare by
construction: just before a ``zero_grad`` would report a discarded gradient
(GG102) for the first time at its line, the watch checks whether that gradient
is finite (one foreach norm, one sync), because clearing a NaN/Inf gradient
instead of stepping is deliberate; and in a loop that updates parameters by
hand, a ``.grad`` changed in place after the update is checked for zeros
(a ``p.grad.zero_()`` by hand) before calling it stale.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Dict, List, Optional

import torch

from .. import _channel
from .._errors import GradguardError
from ..findings import Finding
from . import _hooks, rules
from ._graph import UNKNOWN, analyze_loss
from ._reporter import Reporter, model_names
from ._source import Site, Source
from ._tracker import MAX_PENDING, OptState, ParamState, Pass, Tracker
from ._view import DiscardView, EndView, PassView, StepView

_BATCH_STATS = (torch.nn.modules.batchnorm._BatchNorm,)


class Session:
    """The state of one active watch. Created on ``__enter__``, closed on ``__exit__``."""

    def __init__(self, mode: str, ignore: frozenset, findings: List[Finding], reported: set, rewrite=None):
        self.source = Source()
        self.tracker = Tracker(self._discarded)
        self.gg102 = rules.gg102.Lines()
        self.reporter = Reporter(mode, ignore, findings, reported, self._names, self._optimizer_slot, rewrite)
        self.modules: Dict[int, torch.nn.Module] = {}
        self.bn_ran: Dict[int, int] = {}  # id(batch-norm module) -> clock when it last ran with batch statistics
        self.bn_modules: Dict[int, torch.nn.Module] = {}
        self.clock = 0  # ticks once per backward pass and per step
        self.passes = 0
        self.stepping = False  # between a step's pre and post hook (a closure runs in there)
        # One entry per step in progress (steps nest: SAM's step(closure) calls its base
        # optimizer's step): whether another step ran inside it.
        self._step_stack: List[bool] = []
        self.broken = False  # an internal error turned the watch off (see guard)
        self.in_pass = False  # inside a watched backward call
        self.amp_roots: "weakref.WeakSet[torch.Tensor]" = weakref.WeakSet()  # losses GradScaler.scale returned
        self.deferred: list = []  # GG105 checks waiting for device-side item counts
        self._name_cache: Optional[Dict[int, str]] = None
        self._module_hooks: list = []
        self._open: List[Pass] = []  # passes not yet used by a step whose gradient is still somewhere
        self._nonfinite = False  # verdict of the finiteness check before a zero_grad about to report GG102
        # id(optimizer state) -> (passes feeding its step in progress, parameters with gradient,
        # whether some of that gradient was assigned by hand), from the step's check.
        self._fed: Dict[int, tuple] = {}
        self.thread = threading.get_ident()
        self.graph_grads = False  # a backward(create_graph=True) was seen: .grad may hold a graph (GG108)
        # The global forward hook learns which models run (for parameter names and
        # GG106), but it moves every module call onto nn.Module's slow path. So it
        # is wanted for the first two steps, then again for one step at steps 8, 16,
        # 32, ... to catch models that first run later: the cost fades out.
        self.wants_forward = True
        self._steps = 0
        self._discover_until = 2
        self._next_discovery = 8
        self._subscription = None

    # ------------------------------------------------------------ install
    def install(self) -> None:
        self._subscription = _channel.subscribe_clearing(self._on_accumulator_clearing)
        try:
            _hooks.add(self)
        except BaseException:
            self._subscription.remove()
            raise

    def uninstall(self) -> None:
        _hooks.discard(self)
        if self._subscription is not None:
            self._subscription.remove()
            self._subscription = None
        for h in self._module_hooks:
            h.remove()
        self._module_hooks = []

    # ------------------------------------------------------------ safety
    def guard(self, fn, *args):
        """Run a piece of bookkeeping; a bug in it must never break the user's training.

        On an unexpected error the watch warns once and turns itself off (it
        only forwards from then on). Findings raised in "raise" mode pass.
        """
        try:
            return fn(*args)
        except GradguardError:
            raise
        except Exception as exc:
            self.broken = True
            warnings.warn(
                f"gradguard.watch stopped watching after an internal error ({type(exc).__name__}: {exc}); "
                "training continues unwatched. Please report this with the traceback.",
                RuntimeWarning,
                stacklevel=3,
            )
            return None

    def report(self, code: str, detail: str, site: Site, step: Optional[int], params=()) -> None:
        self.reporter.report(code, detail, site, step, params)

    # ------------------------------------------------------------ names
    def _names(self) -> Dict[int, str]:
        if self._name_cache is None:
            self._name_cache = model_names(list(self.modules.values()))
        return self._name_cache

    def _optimizer_slot(self, p: torch.Tensor) -> Optional[str]:
        for ost in self.tracker.opts.values():
            for gi, group in enumerate(ost.opt.param_groups):
                for pi, q in enumerate(group["params"]):
                    if q is p:
                        return f"{ost.name}.param_groups[{gi}]['params'][{pi}]"
        return None

    # ------------------------------------------------------------ forward
    def forward(self, module) -> None:
        if id(module) not in self.modules and not self.broken:
            self.guard(self._see_module, module)

    def _see_module(self, module: torch.nn.Module) -> None:
        self.modules[id(module)] = module
        self._name_cache = None
        params = self.tracker.params
        for p in module.parameters():
            if p.requires_grad and id(p) not in params:
                self.tracker.state(p)
        if isinstance(module, _BATCH_STATS):
            self.bn_modules[id(module)] = module
            self._module_hooks.append(module.register_forward_hook(self._on_batch_stats_forward))

    def _on_batch_stats_forward(self, module, args, output):
        # Batch statistics are used in training mode, and always without running stats.
        if module.training or getattr(module, "running_mean", None) is None:
            self.bn_ran[id(module)] = self.clock + 1

    def _batch_stats(self, ost: OptState) -> List[torch.nn.Module]:
        """Batch-norm layers that ran since ``ost``'s last step and belong to a model it trains."""
        if not self.bn_ran:
            return []
        ran = [self.bn_modules[mid] for mid, t in self.bn_ran.items() if t > ost.clock]
        return [m for m in ran if self._feeds(m, ost)]

    def _feeds(self, bn: torch.nn.Module, ost: OptState) -> bool:
        if any(id(p) in ost.ids for p in bn.parameters()):
            return True
        for m in self.modules.values():
            if m is bn or not any(id(p) in ost.ids for p in m.parameters()):
                continue
            if any(sub is bn for sub in m.modules()):
                return True
        return False

    # ------------------------------------------------------------ backward
    def backward(self, orig, tensors, args, kwargs):
        if self.broken or self.in_pass:
            # A backward inside a backward (reentrant checkpointing) is part of the outer pass.
            return orig(tensors, *args, **kwargs)
        before = self.guard(self._before_pass, tensors, args, kwargs)
        if before is None:
            return orig(tensors, *args, **kwargs)
        self.in_pass = True
        try:
            result = orig(tensors, *args, **kwargs)
        except BaseException:
            self.in_pass = False
            self.guard(self._after_pass, *before)  # what did arrive is still gradient
            self.reporter.drop()  # but the user's own error comes first
            raise
        self.in_pass = False
        self.guard(self._after_pass, *before)
        self.reporter.flush()
        return result

    def _before_pass(self, tensors, args, kwargs):
        site = self.source.site()
        info = UNKNOWN
        grad_tensors = args[0] if args else kwargs.get("grad_tensors", kwargs.get("grad_variables"))
        root = tensors
        if isinstance(root, (tuple, list)) and len(root) == 1:
            root = root[0]
        if isinstance(root, torch.Tensor) and grad_tensors is None and root.numel() == 1:
            info = analyze_loss(root, amp_root=root in self.amp_roots)
        tracker = self.tracker
        tracked = tracker.tracked()
        counted = _channel.accumulator_counted()
        # A pass made by gradguard's own code (accumulate_batch) is weighted by it exactly,
        # and so is whatever that code did to .grad before it (setting gradients aside).
        own = counted is None and self.source.called_by_gradguard()
        tracker.own = own
        try:
            tracker.sync(tracked)
        finally:
            tracker.own = False
        if tracker.manual and not own:
            moved = tracker.moved_by_hand()
            if moved:
                stale = _not_zeroed(moved)  # a .grad zeroed by hand after the update is cleared
                for st in moved:
                    tracker.cleared(st, None)  # judged once, here; what follows is this pass's
                rules.at_pass(PassView(site, stale, self.report))
        self.passes += 1
        self.clock += 1
        # A pass inside a step (an LBFGS or Lightning closure) is read by that step.
        ps = Pass(self.passes, site, info, counted is not None or own, used=self.stepping, counted=own or counted is not False)
        # Tensor.backward passes (gradient, retain_graph, create_graph) positionally.
        retain = args[1] if len(args) > 1 else kwargs.get("retain_graph")
        create = args[2] if len(args) > 2 else kwargs.get("create_graph", False)
        ps.retained = bool(retain) or bool(create)
        if create:
            self.graph_grads = True
        return ps, tracked

    def _after_pass(self, ps: Pass, tracked: List[ParamState]) -> None:
        self.tracker.arrived(ps, tracked)
        if ps.live and not ps.used:
            if len(self._open) >= 4 * MAX_PENDING:
                self._open = [q for q in self._open if not q.used and q.live > 0]
            self._open.append(ps)

    def scaled(self, out: torch.Tensor) -> None:
        # Remember the scaled loss (weakly): when it is back-propagated, its top factor
        # is the scaler's, and the scaler may skip the step on inf/NaN without a trace.
        if not self.broken:
            self.amp_roots.add(out)

    # ------------------------------------------------------------ clearing
    def zero_grad(self, orig, owner, args, kwargs, module: bool):
        if self.broken:
            return orig(owner, *args, **kwargs)
        if module:
            states = self.guard(lambda: [self.tracker.state(p) for p in owner.parameters() if p.requires_grad])
        else:
            ost = self.guard(self.tracker.opt_state, owner)
            states = ost.params if ost is not None else None
        if states is None:
            return orig(owner, *args, **kwargs)
        # Account for earlier changes first: an in-place unscale or clip since the last
        # event is not this call's doing. Only needed while some pass's gradient is not
        # yet used by a step (``_open``): otherwise nothing can be discarded, and the
        # clearing is seen by the next event instead (one loop over the parameters less).
        site = None
        if self._open:
            self.guard(self.tracker.sync, states)
            if not _channel.in_accumulator_clearing():
                site = self.guard(self.source.site)
                if site is not None:
                    grads = self.guard(self._would_report, states, site)
                    if grads:
                        # About to report GG102 at this line for the first time: is the gradient finite?
                        self._nonfinite = not _all_finite(grads)
        set_to_none = (args[0] if args else kwargs.get("set_to_none", True))
        try:
            result = orig(owner, *args, **kwargs)
            if self._open or not set_to_none:
                self.guard(self._cleared_by_zero_grad, states, site)
        finally:
            self._nonfinite = False
        self.reporter.flush()
        return result

    def _cleared_by_zero_grad(self, states, site):
        self.tracker.own = _channel.in_accumulator_clearing()
        try:
            self.tracker.sync(states, site or self.source.site(2), zero_fill=True)
        finally:
            self.tracker.own = False

    def _discarded(self, ps: Pass, st: ParamState, site: Optional[Site]) -> None:
        self.gg102.discarded(DiscardView(ps, st.opt, site, self._nonfinite, self.report))

    def _would_report(self, states: List[ParamState], site: Site) -> List[torch.Tensor]:
        """Before a zero_grad at ``site``: the gradients it would report as discarded, if any (else [])."""
        open_ = [ps for ps in self._open if not ps.used and ps.live > 0 and not ps.reported]
        self._open = open_
        if not open_ or not self.reporter.wants("GG102", site):
            return []
        ids = None
        grads: List[torch.Tensor] = []
        for ps in open_:
            if ps.info.amp:
                continue
            live = [q for q in ps.params if ps in q.pending]
            if not live or live[0].opt is None:
                continue
            if ids is None:
                ids = {id(q.p) for q in states}
            if not all(id(q.p) in ids for q in live):
                continue
            if self.gg102.near(site, live[0].opt):
                grads.extend(q.p.grad for q in live if q.p.grad is not None)
        return grads

    def _on_accumulator_clearing(self) -> None:
        # The Accumulator cleared .grad (maybe by hand: p.grad = None when it drops a window):
        # account for it now, while it is still known to be the Accumulator's own. Only on
        # this watch's thread: another thread's buffers are not ours to read.
        if self.broken or not self._open or self.thread != threading.get_ident():
            return
        self.tracker.own = True
        try:
            self.guard(self.tracker.sync, self.tracker.tracked())
        finally:
            self.tracker.own = False

    # ------------------------------------------------------------ step
    def step_pre(self, opt, args, kwargs):
        if self.broken:
            return
        self.guard(self._step_pre, opt, args, kwargs)
        try:
            self.reporter.flush()
        except GradguardError:
            # "raise": the step will not run, so no post hook either
            self._fed.pop(id(self.tracker.opt_state(opt)), None)
            if self._step_stack:
                self._step_stack.pop()
            self.stepping = bool(self._step_stack)
            raise

    def _step_pre(self, opt, args, kwargs):
        ost = self.tracker.opt_state(opt)
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        ost.closure = closure is not None
        if not ost.closure:
            # Checked before the optimizer reads anything, so "raise" stops a bad update.
            self._check_step(ost, self.source.site())
        stack = self._step_stack
        for i in range(len(stack)):
            stack[i] = True  # the steps this one runs inside
        stack.append(False)
        self.stepping = True

    def _check_step(self, ost: OptState, site: Site) -> None:
        params = ost.params
        grads = [st.p.grad for st in params]
        self.tracker.sync(params, grads=grads)  # first: a clearing found now decides GG110 vs GG102
        view = StepView(ost, site, self.report, self._batch_stats, self.deferred.append if len(self.deferred) < 256 else _drop)
        graphs = self.graph_grads  # only backward(create_graph=True) leaves a graph in .grad
        with_grad, stale, zero_only, passes = view.with_grad, view.stale, view.zero_only, view.passes
        last = None
        by_hand = False
        for st, g in zip(params, grads):  # (syncing changes no .grad)
            if g is None:
                continue
            pending = st.pending
            if not pending:
                if st.zero:
                    zero_only.append(st)
                    continue
                by_hand = by_hand or not st.consumed  # gradient no watched pass made
            with_grad.append(st)
            if st.consumed:
                stale.append(st)
            if graphs and g.requires_grad:
                view.graph.append(st)
            for ps in pending:
                if ps is not last:
                    passes[ps.index] = last = ps
        self._fed[id(ost)] = (passes, with_grad, by_hand)
        rules.at_step(view)

    def step_post(self, opt, args, kwargs):
        inner = self._step_stack.pop() if self._step_stack else False
        self.stepping = bool(self._step_stack)
        if not self.broken:
            self.guard(self._step_post, opt, inner)
            self.reporter.flush()

    def _step_post(self, opt, inner: bool = False):
        ost = self.tracker.opt_state(opt)
        if ost.closure and not inner:
            # The closure's backward ran inside step(): only now is there something to check.
            # Unless another optimizer's step ran in there (SAM's step(closure) calls its base
            # optimizer's step): that one checked, and applied, the gradient already.
            self._check_step(ost, self.source.site())
        self.clock += 1
        checked = self._fed.pop(id(ost), None)
        if checked is None:  # not checked here (an outer step's closure ran this one): mark per parameter
            checked = ({ps.index: ps for st in ost.params for ps in st.pending},
                       [st for st in ost.params if st.p.grad is not None], False)
        fed, with_grad, by_hand = checked
        if ost.open_lines:
            self.gg102.close(ost, {ps.site for ps in fed.values()}, by_hand)
        for ps in fed.values():
            ps.used = True
        self.tracker.applied(ost, with_grad)
        ost.steps += 1
        ost.clock = self.clock
        if self._open:
            self._open = [ps for ps in self._open if not ps.used and ps.live > 0]
        self._discovery()

    def _discovery(self) -> None:
        self._steps += 1
        if self.wants_forward:
            if self._steps >= self._discover_until:
                self.wants_forward = False
                _hooks.update_forward_hook()
        elif self._steps == self._next_discovery:
            self.wants_forward = True
            _hooks.update_forward_hook()
            self._discover_until = self._steps + 1
            self._next_discovery *= 2

    # ------------------------------------------------------------ end
    def close(self, check: bool) -> None:
        """Uninstall; with ``check``, run the end-of-watch rules (GG103, GG105 deferred, GG106)."""
        self.uninstall()
        if check and not self.broken:
            tracker = self.tracker
            self.guard(tracker.sync, tracker.tracked())
            self.guard(rules.at_end, EndView(list(tracker.opts.values()), list(tracker.params.values()), self.report, self.deferred))
            self.reporter.flush()


def _drop(item) -> None:
    pass


def _not_zeroed(states: List[ParamState]) -> List[ParamState]:
    """Those of ``states`` whose ``.grad`` is not all zeros (one foreach max-norm, one sync)."""
    grads = [st.p.grad for st in states]
    try:
        norms = torch._foreach_norm(grads, float("inf"))
        device = norms[0].device
        nonzero = (torch.stack([n.to(device=device, dtype=torch.float32) for n in norms]) != 0).tolist()
    except Exception:
        return states
    return [st for st, nz in zip(states, nonzero) if nz]


def _all_finite(grads: List[torch.Tensor]) -> bool:
    """Whether every value of ``grads`` is finite: one foreach max-norm, one device sync.

    The max-norm (not the 2-norm) cannot overflow a float16 gradient whose values are finite.
    Where it cannot be computed (sparse gradients), the gradient counts as finite.
    """
    try:
        norms = torch._foreach_norm(grads, float("inf"))
        device = norms[0].device
        return bool(torch.isfinite(torch.stack([n.to(device=device, dtype=torch.float32) for n in norms])).all())
    except Exception:
        return True
