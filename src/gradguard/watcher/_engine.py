"""The watch's machinery: what it installs, and what it records at each event.

Installed for the duration of a watch, all removed on exit:

* PyTorch's global optimizer step pre/post hooks (every optimizer, whenever it
  was built) and its global module forward hook (which modules run, so that
  parameters get their qualified names and batch-norm layers are noticed);
* thin wrappers around ``torch.autograd.backward`` (which ``Tensor.backward``
  calls), ``Optimizer.zero_grad`` / ``Module.zero_grad`` and
  ``torch.amp.GradScaler.scale``. PyTorch has no public hook that sees the root
  of a backward pass, a ``zero_grad`` call, or a loss scaled for AMP; the
  wrappers cost one Python call per backward pass, clearing or scaling, where a
  per-parameter tensor hook would cost one per parameter.

The work per event is one pass over the parameters concerned, reading
``p.grad`` and its ``_version``: no gradient values, no device syncs. The one
exception is rare by construction: just before a ``zero_grad`` would report a
discarded gradient (GG102) for the first time at its line, the watch checks
whether that gradient is finite (one foreach norm, one sync), because clearing
a NaN/Inf gradient instead of stepping is deliberate (see :meth:`Engine.discard`).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Dict, List, Optional, Sequence

import torch

from .._errors import GradguardError, GradientBugError, GradientBugWarning
from ..findings import Finding
from ..findings import make_finding
from . import _checks
from ._graph import UNKNOWN, analyze_loss
from . import _marks
from ._marks import accumulator_counted, in_accumulator_clearing
from ._source import Site, user_site
from ._state import DISCARD_RUN, MAX_PENDING, DiscardLine, OptState, ParamState, Pass, optimizer_moves_zero_grads

_BATCH_STATS = (torch.nn.modules.batchnorm._BatchNorm,)


class _Patch:
    """Replace ``owner.name`` by a wrapper until :meth:`undo`.

    If someone else wrapped the attribute after us, undoing would drop their
    wrapper; we then leave ours in place, switched off (it only forwards).
    """

    def __init__(self, owner, name: str, make):
        self.owner, self.name = owner, name
        self.orig = owner.__dict__[name]
        self.on = True
        self.wrapper = make(self.orig, self)
        setattr(owner, name, self.wrapper)

    def undo(self) -> None:
        self.on = False
        if self.owner.__dict__.get(self.name) is self.wrapper:
            setattr(self.owner, self.name, self.orig)


class Engine:
    """The state of one active watch. Created on ``__enter__``, closed on ``__exit__``."""

    def __init__(self, mode: str, ignore: frozenset, findings: List[Finding], reported: Optional[set] = None):
        self.mode = mode
        self.ignore = ignore
        self.findings = findings
        # (code, path, line): each finding once per location, also across re-entries of one watch.
        self._reported = set() if reported is None else reported
        self._queue: List[Finding] = []  # found during an event, emitted when it ends
        self.params: Dict[int, ParamState] = {}
        self._tracked: List[ParamState] = []
        self._dirty = False
        self.modules: Dict[int, torch.nn.Module] = {}
        self.opts: Dict[int, OptState] = {}
        self.bn_ran: Dict[int, int] = {}  # id(batch-norm module) -> clock when it last ran with batch statistics
        self.bn_modules: Dict[int, torch.nn.Module] = {}
        self.clock = 0  # ticks once per backward pass and per step
        self.passes = 0
        self.stepping = False  # between a step's pre and post hook (a closure runs in there)
        # One entry per step in progress (steps nest: SAM's step(closure) calls its base
        # optimizer's step): whether another step ran inside it.
        self._step_stack: List[bool] = []
        self.broken = False  # an internal error turned the watch off (see guard)
        self.in_pass = False  # inside a watched backward call (on any thread: one pass at a time)
        self.amp_roots: "weakref.WeakSet[torch.Tensor]" = weakref.WeakSet()  # losses GradScaler.scale returned
        self.deferred: list = []  # GG105 checks waiting for device-side item counts
        self._names: Optional[Dict[int, str]] = None
        self._handles: list = []
        # The global forward hook learns which models run (for parameter names and
        # GG106), but it moves every module call onto nn.Module's slow path. So it
        # is on for the first two steps, then again for one step at steps 8, 16,
        # 32, ... to catch models that first run later: the cost fades out.
        self._fwd = None
        self._steps = 0
        self._discover_until = 2
        self._next_discovery = 8
        self._patches: List[_Patch] = []
        self._module_hooks: list = []
        # GG102 bookkeeping (see discard): per (clearing line, optimizer) its DiscardLine;
        # the passes not yet used by a step whose gradient is still somewhere (pruned lazily);
        # whether the clearing being handled is the Accumulator's own; and the verdict of the
        # finiteness check made just before a zero_grad that is about to report.
        self.discards: Dict[tuple, DiscardLine] = {}
        self._open: List[Pass] = []
        self._own = False
        self._nonfinite = False
        self.graph_grads = False  # a backward(create_graph=True) was seen: .grad may hold a graph (GG108)

    # ------------------------------------------------------------ install
    def install(self) -> None:
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim_module

        try:
            self._handles.append(optim_module.register_optimizer_step_pre_hook(self._on_step_pre))
            self._handles.append(optim_module.register_optimizer_step_post_hook(self._on_step_post))
            self._fwd = nn_module.register_module_forward_hook(self._on_forward)
            self._patches.append(_Patch(torch.autograd, "backward", self._wrap_backward))
            self._patches.append(_Patch(torch.optim.Optimizer, "zero_grad", self._wrap_optimizer_zero_grad))
            self._patches.append(_Patch(torch.nn.Module, "zero_grad", self._wrap_module_zero_grad))
            self._patches.append(_Patch(torch.amp.GradScaler, "scale", self._wrap_scaler_scale))
            _marks._clearing_listeners.append(self._on_accumulator_clearing)
        except BaseException:
            self.uninstall()
            raise

    def uninstall(self) -> None:
        for h in self._handles + self._module_hooks:
            h.remove()
        if self._fwd is not None:
            self._fwd.remove()
            self._fwd = None
        for patch in reversed(self._patches):
            patch.undo()
        self._handles, self._module_hooks, self._patches = [], [], []
        listeners = _marks._clearing_listeners
        for i in range(len(listeners) - 1, -1, -1):
            if getattr(listeners[i], "__self__", None) is self:
                del listeners[i]

    # ------------------------------------------------------------ safety
    def guard(self, fn, *args):
        """Run a piece of bookkeeping; a bug in it must never break the user's training.

        On an unexpected error the watch warns once and turns itself off (its
        wrappers only forward from then on). Findings raised in "raise" mode pass.
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

    # ------------------------------------------------------------ findings
    def report(self, code: str, detail: str, site: Site, step: Optional[int], params: Sequence[ParamState] = ()) -> None:
        """Queue a finding (once per code and location); emitted when the current event ends."""
        if code in self.ignore:
            return
        key = (code, site[0], site[1])
        if key in self._reported:
            return
        self._reported.add(key)
        names = self.param_names(params)
        self._queue.append(make_finding(code, detail, path=site[0], line=site[1], step=step, params=names or None))

    def flush(self) -> None:
        """Emit queued findings: record, warn, or raise the first one."""
        queue, self._queue = self._queue, []
        for f in queue:
            self.findings.append(f)
        if self.mode == "warn":
            for f in queue:
                warnings.warn_explicit(f"{f.code} {f.message}", GradientBugWarning, f.path or "<unknown>", f.line or 0)
        elif self.mode == "raise" and queue:
            raise GradientBugError(queue[0])

    # ------------------------------------------------------------ names
    def param_names(self, states: Sequence[ParamState], limit: int = 10) -> List[str]:
        if not states:
            return []
        if self._names is None:
            self._names = self._build_names()
        out = []
        for st in states[:limit]:
            name = self._names.get(id(st.p))
            if name is None:
                name = self._optimizer_slot(st) or f"<tensor {tuple(st.p.shape)}>"
            out.append(name)
        if len(states) > limit:
            out.append(f"... ({len(states) - limit} more)")
        return out

    def _build_names(self) -> Dict[int, str]:
        # Top-level modules are those seen in forward that are no other seen module's child.
        children = set()
        for m in self.modules.values():
            for sub in m.modules():
                if sub is not m:
                    children.add(id(sub))
        roots = [m for mid, m in self.modules.items() if mid not in children]
        roots = [m for m in roots if next(m.parameters(), None) is not None]
        # One model: its qualified names (encoder.layer.0.weight), as the user knows them.
        # Several (a GAN, models kept in a ModuleDict): prefixed by the model's class, and
        # by its class and number in the order they first ran (Linear#1, Linear#2) when
        # two share a class. A single model that is one layer (nn.Linear) gets its class
        # too: a bare "weight" names nothing.
        classes: Dict[str, int] = {}
        for root in roots:
            classes[type(root).__name__] = classes.get(type(root).__name__, 0) + 1
        seen: Dict[str, int] = {}
        names: Dict[int, str] = {}
        for root in roots:
            cls = type(root).__name__
            seen[cls] = seen.get(cls, 0) + 1
            label = f"{cls}#{seen[cls]}" if classes[cls] > 1 else cls
            named = list(root.named_parameters())
            prefix = len(roots) > 1 or not root._modules
            for name, p in named:
                names.setdefault(id(p), f"{label}.{name}" if prefix else name)
        return names

    def _optimizer_slot(self, st: ParamState) -> Optional[str]:
        for ost in self.opts.values():
            for gi, group in enumerate(ost.opt.param_groups):
                for pi, p in enumerate(group["params"]):
                    if p is st.p:
                        return f"{ost.name}.param_groups[{gi}]['params'][{pi}]"
        return None

    # ------------------------------------------------------------ tracking
    def state(self, p: torch.Tensor) -> ParamState:
        st = self.params.get(id(p))
        if st is None:
            st = self.params[id(p)] = ParamState(p)
            self._dirty = True
            g = p.grad
            if g is not None:
                # Gradient from before the watch or from an unseen source: it is
                # "a gradient", but no watched pass made it.
                st.consumed = False
                st.remember(g)
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
        return ost

    def observe_all(self, states: List[ParamState], clearing_site: Optional[Site] = None, zero_fill: bool = False) -> None:
        """:meth:`observe` each state; the common case (nothing changed) is inlined, it runs per parameter per event."""
        observe = self.observe
        for st in states:
            g = st.p.grad
            ref = st.ref
            if g is None:
                if ref is None:
                    continue
                if not st.pending:  # set to None with nothing waiting in it: the usual clearing
                    st.ref = None
                    st.consumed = st.zero = False
                    continue
            elif ref is not None and g._version == st.ver and ref() is g:
                continue
            observe(st, clearing_site, zero_fill)

    def observe(self, st: ParamState, clearing_site: Optional[Site] = None, zero_fill: bool = False) -> None:
        """Account for what happened to ``st``'s buffer since it was last seen."""
        g = st.p.grad
        ref = st.ref
        if g is None:
            if ref is not None:
                st.ref = None
                self.cleared(st, clearing_site)
            return
        if ref is None or ref() is not g:
            if ref is not None:
                self.cleared(st, clearing_site)
            # A buffer that no watched pass filled (assigned by hand, or filled
            # by a backward the watch did not see): a gradient of unknown origin.
            st.remember(g)
            return
        if g._version != st.ver:
            st.ver = g._version
            if zero_fill:
                self.cleared(st, clearing_site)
                st.zero = True
            elif st.consumed and not st.pending:
                # Only already-applied gradient was in there: this was a p.grad.zero_().
                self.cleared(st, clearing_site)
            else:
                # Scaled, clipped or unscaled in place: the gradient is still there, and
                # some code has looked at it. GradScaler.step() unscales and then skips the
                # optimizer step on inf/NaN; clearing such a buffer is not "discarded unseen".
                st.zero = False
                for ps in st.pending:
                    ps.used = True

    def cleared(self, st: ParamState, site: Optional[Site]) -> None:
        """The buffer was emptied: passes whose last pending gradient this was are discarded (GG102)."""
        st.consumed = False
        st.zero = False
        if not st.pending:
            return
        if st.opt is None:
            # No optimizer holds this parameter (manual SGD reads .grad itself):
            # "used by a step" has no meaning, so neither has "discarded".
            for ps in st.pending:
                ps.live -= 1
            st.pending.clear()  # reused, never reallocated: see _after_pass
            return
        # The Accumulator's own clearing (after its step, or dropping a window on purpose)
        # discards nothing; any other clearing of its passes' gradient (a zero_grad left in
        # the loop) is judged like any other. A GradScaler skips the step on inf/NaN
        # (unseen: it only calls step() or not), so its passes are never judged.
        own = self._own or in_accumulator_clearing()
        for ps in st.pending:
            ps.live -= 1
            if ps.live <= 0 and not ps.used and not ps.reported and not own and not ps.info.amp:
                ps.reported = True
                self.discard(ps, st, site)
        st.pending.clear()  # reused, never reallocated: see _after_pass

    # ------------------------------------------------------------ GG102
    # A discard (a pass whose every gradient was cleared before any step used it) is
    # reported only when it is systematic, as SPEC's GG102 describes it: a zero_grad
    # between backward and step, or on every micro-batch of a window, discards in
    # every step interval. Skipping an update on purpose (a NaN/Inf or a loss/grad-norm
    # spike: backward, no step, zero_grad) discards now and then. So, per clearing line
    # and optimizer (a DiscardLine):
    #   (a) a discard of non-finite gradient is never counted (checked only when about
    #       to report, before a zero_grad clears it: one foreach norm, one sync);
    #   (b) a line is reported at its first discard in the DISCARD_RUN-th (3rd)
    #       consecutive step interval, counted from its first discard ever, where every
    #       earlier interval closed with a step that had no gradient at all (zero_grad
    #       between backward and step) or was fed by the same backward line as the
    #       discarded passes (the last micro-batch of the window). An interval without a
    #       discard from the line, or closed by a step fed only by other backward lines
    #       (SAM: first pass, perturb, zero_grad, second pass, step), marks the line as
    #       deliberate for good;
    #   (c) a pass whose parameters were modified in place after it (SAM's perturbation
    #       p.add_(e_w), a hand-written update) had its gradient used: no discard.
    # Each bug is caught in its third step interval (raise mode stops it there, at the
    # zero_grad); an occasional skip would need three skips in three consecutive
    # intervals right from its first one (skip, step, skip, step, skip) to be reported.
    def discard(self, ps: Pass, st: ParamState, site: Optional[Site]) -> None:
        """``ps`` lost all its gradient to a clearing at ``site`` (None: seen later, made by hand)."""
        if ps.moved():
            return  # (c)
        ost = st.opt
        j = ost.steps
        ost.discard_at = j  # GG110 then leaves this interval's step to GG102
        if self._nonfinite:
            return  # (a)
        where = site if site is not None and site[0] is not None else ps.site
        key = (where, id(ost))
        line = self.discards.get(key)
        if line is None:
            line = self.discards[key] = DiscardLine(j)
        if line.banned:
            return
        if line.last != j:
            if line.last != j - 1 or line.confirmed != j - 1:
                line.banned = True  # (b): an interval went by without a (confirmed) discard
                return
            line.last = j
            line.sources = set()
        line.sources.add(ps.site)
        if not ost.open_lines or ost.open_lines[-1] is not line:
            ost.open_lines.append(line)
        if line.run >= DISCARD_RUN - 1:
            _checks.discarded(self, ps, st, site, line.run + 1)

    def _close_interval(self, ost: OptState, passes: Optional[dict]) -> None:
        """At a step: confirm or dismiss the lines that discarded in the interval it ends."""
        lines, ost.open_lines = ost.open_lines, []
        j = ost.steps
        if passes is None:
            fed = {ps.site for st in ost.params for ps in st.pending}
        else:
            fed = {ps.site for ps in passes.values()}
        for line in lines:
            if line.banned or line.last != j:
                continue
            if not fed or fed & line.sources:
                line.run += 1
                line.confirmed = j
            else:
                line.banned = True

    def _would_report(self, states: List[ParamState], site: Site) -> List[torch.Tensor]:
        """Before a zero_grad at ``site``: the gradients it would report as discarded, if any (else [])."""
        open_ = [ps for ps in self._open if not ps.used and ps.live > 0 and not ps.reported]
        self._open = open_
        if not open_ or "GG102" in self.ignore or ("GG102", site[0], site[1]) in self._reported:
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
            ost = live[0].opt
            line = self.discards.get((site, id(ost)))
            if line is None or line.banned or line.run < DISCARD_RUN - 1:
                continue
            j = ost.steps
            if line.last == j or (line.last == j - 1 and line.confirmed == j - 1):
                grads.extend(q.p.grad for q in live if q.p.grad is not None)
        return grads

    def _on_accumulator_clearing(self) -> None:
        # The Accumulator cleared .grad (maybe by hand: p.grad = None when it drops a window):
        # account for it now, while it is still known to be the Accumulator's own.
        if self.broken or not self._open:
            return
        self._own = True
        try:
            self.guard(self.observe_all, self.tracked())
        finally:
            self._own = False

    # ------------------------------------------------------------ forward
    def _on_forward(self, module, args, output):
        if id(module) not in self.modules and not self.broken:
            self.guard(self._see_module, module)

    def _see_module(self, module: torch.nn.Module) -> None:
        self.modules[id(module)] = module
        self._names = None
        for p in module.parameters():
            if p.requires_grad and id(p) not in self.params:
                self.state(p)
        if isinstance(module, _BATCH_STATS):
            self.bn_modules[id(module)] = module
            self._module_hooks.append(module.register_forward_hook(self._on_batch_stats_forward))

    def _on_batch_stats_forward(self, module, args, output):
        # Batch statistics are used in training mode, and always without running stats.
        if module.training or getattr(module, "running_mean", None) is None:
            self.bn_ran[id(module)] = self.clock + 1

    # ------------------------------------------------------------ backward
    def _wrap_backward(self, orig, patch):
        engine = self

        def backward(tensors, *args, **kwargs):
            if not patch.on:
                return orig(tensors, *args, **kwargs)
            return engine.run_backward(orig, tensors, args, kwargs)

        backward.__wrapped__ = orig
        backward.__doc__ = orig.__doc__
        return backward

    def run_backward(self, orig, tensors, args, kwargs):
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
            self._queue = []  # but the user's own error comes first
            raise
        self.in_pass = False
        self.guard(self._after_pass, *before)
        self.flush()
        return result

    def _before_pass(self, tensors, args, kwargs):
        site = user_site()
        info = UNKNOWN
        grad_tensors = args[0] if args else kwargs.get("grad_tensors", kwargs.get("grad_variables"))
        root = tensors
        if isinstance(root, (tuple, list)) and len(root) == 1:
            root = root[0]
        if isinstance(root, torch.Tensor) and grad_tensors is None and root.numel() == 1:
            info = analyze_loss(root, amp_root=root in self.amp_roots)
        tracked = self.tracked()
        self.observe_all(tracked)
        self.passes += 1
        self.clock += 1
        # A pass inside a step (an LBFGS or Lightning closure) is read by that step.
        counted = accumulator_counted()
        ps = Pass(self.passes, site, info, counted is not None, used=self.stepping, counted=counted is not False)
        # Tensor.backward passes (gradient, retain_graph, create_graph) positionally.
        retain = args[1] if len(args) > 1 else kwargs.get("retain_graph")
        create = args[2] if len(args) > 2 else kwargs.get("create_graph", False)
        ps.retained = bool(retain) or bool(create)
        if create:
            self.graph_grads = True
        return ps, tracked

    def _after_pass(self, ps: Pass, tracked: List[ParamState]) -> None:
        # Whatever changed during the pass is its gradient arriving (accumulated in
        # place, or a new tensor where .grad was None or autograd replaced it).
        reached = ps.params
        add = reached.append
        new_ref = weakref.ref
        for st in tracked:
            g = st.p.grad
            if g is None:
                continue
            ref = st.ref
            ver = g._version
            if ref is None or ref() is not g:
                st.ref = new_ref(g)
            elif ver == st.ver:
                continue
            st.ver = ver
            # ParamState.add, inlined: this loop runs per parameter per pass. Each
            # ParamState keeps one pending list for good (cleared, not replaced): a new
            # list per parameter per event would set off CPython's cyclic GC every few
            # hundred parameters, and each collection walks the fresh .grad tensors
            # (measured: 13 ms instead of 1 ms per pass at 2000 parameter tensors).
            pending = st.pending
            if len(pending) >= MAX_PENDING:
                pending[:] = [q for q in pending if not q.used]
            pending.append(ps)
            add(st)
            st.zero = False
            if not st.got:
                st.got = True
                st.first_site = ps.site
        ps.live = len(reached)
        if reached and not ps.used:
            ps.pver = tuple((q.p, q.p._version) for q in reached[:4])
            if len(self._open) >= 4 * MAX_PENDING:
                self._open = [q for q in self._open if not q.used and q.live > 0]
            self._open.append(ps)

    # ------------------------------------------------------------ GradScaler
    def _wrap_scaler_scale(self, orig, patch):
        engine = self

        def scale(scaler, outputs):
            out = orig(scaler, outputs)
            # Remember the scaled loss (weakly): when it is back-propagated, its top factor
            # is the scaler's, and the scaler may skip the step on inf/NaN without a trace.
            if patch.on and out is not outputs and isinstance(out, torch.Tensor):
                engine.amp_roots.add(out)
            return out

        scale.__wrapped__ = orig
        scale.__doc__ = orig.__doc__
        return scale

    # ------------------------------------------------------------ zero_grad
    def _wrap_optimizer_zero_grad(self, orig, patch):
        engine = self

        def zero_grad(opt, *args, **kwargs):
            if not patch.on or engine.broken:
                return orig(opt, *args, **kwargs)
            ost = engine.guard(engine.opt_state, opt)
            if ost is None:
                return orig(opt, *args, **kwargs)
            return engine.run_zero_grad(orig, opt, ost.params, args, kwargs)

        zero_grad.__wrapped__ = orig
        zero_grad.__doc__ = orig.__doc__
        return zero_grad

    def _wrap_module_zero_grad(self, orig, patch):
        engine = self

        def zero_grad(module, *args, **kwargs):
            if not patch.on or engine.broken:
                return orig(module, *args, **kwargs)
            states = engine.guard(lambda: [engine.state(p) for p in module.parameters() if p.requires_grad])
            if states is None:
                return orig(module, *args, **kwargs)
            return engine.run_zero_grad(orig, module, states, args, kwargs)

        zero_grad.__wrapped__ = orig
        zero_grad.__doc__ = orig.__doc__
        return zero_grad

    def run_zero_grad(self, orig, owner, states: List[ParamState], args, kwargs):
        # Account for earlier changes first: an in-place unscale or clip since the last
        # event is not this call's doing (and tells that the gradient was looked at).
        # Only needed while some pass's gradient is not yet used by a step (``_open``):
        # otherwise every change found now or after the call amounts to the same clearing.
        site = None
        if self._open:
            self.guard(self.observe_all, states)
        if self._open and not self.broken and not in_accumulator_clearing():
            site = self.guard(user_site)
            grads = self.guard(self._would_report, states, site) if site is not None else None
            if grads:
                # About to report GG102 at this line for the first time: is the gradient finite?
                self._nonfinite = not _all_finite(grads)
        try:
            result = orig(owner, *args, **kwargs)
            self.guard(lambda: self.observe_all(states, clearing_site=site or user_site(), zero_fill=True))
        finally:
            self._nonfinite = False
        self.flush()
        return result

    # ------------------------------------------------------------ step
    def _on_step_pre(self, opt, args, kwargs):
        if not self.broken:
            self.guard(self._step_pre, opt, args, kwargs)
            try:
                self.flush()
            except GradguardError:
                # "raise": the step will not run, so no post hook either
                if self._step_stack:
                    self._step_stack.pop()
                self.stepping = bool(self._step_stack)
                raise

    def _step_pre(self, opt, args, kwargs):
        ost = self.opt_state(opt)
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        ost.closure = closure is not None
        if not ost.closure:
            # Checked before the optimizer reads anything, so "raise" stops a bad update.
            _checks.step(self, ost, user_site())
        stack = self._step_stack
        for i in range(len(stack)):
            stack[i] = True  # the steps this one runs inside
        stack.append(False)
        self.stepping = True

    def _on_step_post(self, opt, args, kwargs):
        inner = self._step_stack.pop() if self._step_stack else False
        self.stepping = bool(self._step_stack)
        if not self.broken:
            self.guard(self._step_post, opt, inner)
            self.flush()

    def _step_post(self, opt, inner: bool = False):
        ost = self.opt_state(opt)
        if ost.closure and not inner:
            # The closure's backward ran inside step(): only now is there something to check.
            # Unless another optimizer's step ran in there (SAM's step(closure) calls its base
            # optimizer's step): that one checked, and applied, the gradient already.
            _checks.step(self, ost, user_site())
        self.clock += 1
        # The passes feeding this step, gathered by _checks.step: marked used once here,
        # not once per parameter (None: not gathered, mark them per parameter).
        fed, ost.fed = ost.fed, None
        if ost.open_lines:
            self._close_interval(ost, fed)
        if fed is not None:
            for ps in fed.values():
                ps.used = True
        for st in ost.params:
            g = st.p.grad
            if g is None:
                st.ref = None
                continue
            pending = st.pending
            if pending:
                if fed is None:
                    for ps in pending:
                        ps.used = True
                pending.clear()  # reused, never reallocated: see _after_pass
                st.consumed = True
            elif not st.zero:
                st.consumed = True  # a gradient of unknown origin, now applied
            ref = st.ref
            if ref is None or ref() is not g:
                st.ref = weakref.ref(g)
            st.ver = g._version
        ost.steps += 1
        ost.clock = self.clock
        if self._open:
            self._open = [ps for ps in self._open if not ps.used and ps.live > 0]
        self._discovery()

    def _discovery(self) -> None:
        from torch.nn.modules import module as nn_module

        self._steps += 1
        if self._fwd is not None:
            if self._steps >= self._discover_until:
                self._fwd.remove()
                self._fwd = None
        elif self._steps == self._next_discovery:
            self._fwd = nn_module.register_module_forward_hook(self._on_forward)
            self._discover_until = self._steps + 1
            self._next_discovery *= 2

    # ------------------------------------------------------------ end
    def close(self, check: bool) -> None:
        """Uninstall; with ``check``, run the end-of-watch rules (GG103, GG105 deferred, GG106)."""
        self.uninstall()
        if check and not self.broken:
            self.guard(self.observe_all, self.tracked())
            self.guard(_checks.end, self)
            self.flush()


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
