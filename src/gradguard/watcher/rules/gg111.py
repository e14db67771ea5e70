"""GG111 underscaled window: a short window whose losses were each divided by the full window's size.

In a hand-written loop the watch does not know the loop's ``accum_steps``; it
learns it from the loop itself. Per backward line and optimizer, a step fed by
K >= 2 passes of that line, each a mean-reduced loss multiplied by the same
known factor 1/K (read from the loss's autograd graph), shows that the loop
divides each micro-batch by its window size K. A step of the same optimizer
fed by K' < K passes of that line, each also multiplied by 1/K, has a gradient
K'/K of the mean over its items: the final partial window divided by the full
window size (a loop that steps its remainder with ``loss / accum``), or a first
window closed too early (``if i % accum == 0: step()`` steps at i = 0 on one
micro-batch). A short window seen before any full one is kept, and reported
(at its own step number) once a full window of that divisor shows what it was:
a loss divided by a constant for another reason (a temperature, a fixed
normaliser) with one pass per step never shows a full window, and says nothing.

A pass's weight is its loss's factor times the factor by which the waiting
``.grad`` was divided before the step (``p.grad /= K``: a whole divisor, measured).
A window is every pass of the line in the step interval: those the step applies,
and those a clearing threw away before it (``zero_grad`` before every micro-batch,
GG102's), so a loop whose steps each apply one pass of ``loss / K`` still shows
windows of K. The largest window whose passes each weigh 1/(K·m) for a whole m
is a full window too (m > 1: divided twice, GG113's), and a shorter one weighted
the same applies K'/K of what it applies: the final window of a loop that divides
``loss / K`` and ``p.grad /= K``. A shorter window whose weight is not the full
windows' (divided by its own size) or whose weight adds up to 1 or more (no
division: GG104's) is not this rule's.

In a framework's loop the divisor is the framework's, and its integration
declares it (``_channel.framework_divisor``): PyTorch Lightning's automatic
optimization divides every ``training_step`` loss by
``trainer.accumulate_grad_batches`` = K and steps on the epoch's last batch, so
a step fed by K' < K of those passes (the epoch's final partial window, or an
epoch shorter than K) is K'/K of the mean over its micro-batches.

It claims nothing when it cannot tell: for factors it cannot read on the host
(a loss divided by a tensor), for losses scaled by a ``GradScaler`` or weighted
by gradguard itself (the Accumulator, Lightning's ``ExactAccumulation``), for
windows that change size on purpose with their divisor (K' passes divided by
K' are exact), and for a framework's passes whose divisor no integration
declared.
"""

from __future__ import annotations

from typing import Dict, Optional

from ... import _channel
from .._view import StepView, at, plural

CODE = "GG111"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_step": 40, "at_discard": 20}

_TOL = 1e-6
_MEASURED = 1e-4  # a weight that includes a rescaling of .grad, measured from two float32 norms
# Short windows kept per (line, optimizer) while no full window has shown their divisor.
_MAX_WAITING = 8
# Passes of one line cleared unused in one step interval that are counted into its window (beyond: not judged).
_MAX_CUT = 64


class State:
    """Per (backward line, optimizer): the window size K its full windows were divided by, and the
    short windows seen before any full one; per pass: the divisor a framework declared for it."""

    def __init__(self, clock=None):
        self.full: Dict[tuple, int] = {}
        self.weight: Dict[tuple, float] = {}  # key -> the weight of each pass in its latest full window
        # key -> (step interval, the passes of that line a clearing discarded in it): a window's passes
        # that a clearing before every micro-batch threw away still belong to its window (and its count)
        self.cut: Dict[tuple, tuple] = {}
        # key -> {K: (step, passes, with_grad)}: the first step fed by fewer than K passes each times 1/K
        self.waiting: Dict[tuple, Dict[int, tuple]] = {}
        self.declared: Dict[int, tuple] = {}  # pass index -> (K, origin, advice) from the framework
        # (optimizer, K) -> {number of passes: (step, with_grad, site)} of its steps fed only by passes times 1/K
        self.sizes: Dict[tuple, Dict[int, tuple]] = {}
        self.sized_full: set = set()  # (optimizer, K) with a step of K passes or more

    def before_pass(self, ps) -> None:
        mark = _channel.framework_window()
        if mark is not None:
            self.declared[ps.index] = mark

    def after_step(self, ost, passes, by_hand) -> None:
        if self.declared and passes:
            last = max(passes)
            self.declared = {i: m for i, m in self.declared.items() if i > last}


def _factor(group, grad: Optional[float] = None) -> Optional[float]:
    """The one known weight of every pass in ``group`` (mean-reduced losses), else None: its loss's factor,
    times ``grad``, the factor by which the waiting ``.grad`` was rescaled before the step (``p.grad /= K``)."""
    factors = []
    for ps in group:
        info = ps.info
        if ps.managed or ps.framework or ps.retained or info.amp or info.kind != "mean" or info.factor is None:
            return None
        factors.append(info.factor)
    if grad is not None and grad != 1.0:
        n = round(1.0 / grad) if grad > 0 else 0
        if n < 1 or abs(grad * n - 1.0) > _MEASURED:
            return None  # rescaled by no division by a whole number (a clip's factor): not a window's weight
        factors = [f / n for f in factors]  # measured (float32 norms): a division by the integer n
    f = factors[0]
    if not f > 0 or any(abs(g - f) > _TOL * abs(f) for g in factors):
        return None
    return f


def _times(f: float, k: int) -> Optional[int]:
    """m when ``f`` is 1/(k·m) for a whole m >= 1: each of the window's k passes divided by k (and by m
    again: GG113's when m > 1), else None."""
    if not f > 0:
        return None
    m = round(1.0 / (f * k))
    return m if m >= 1 and abs(f * k * m - 1) <= _TOL else None


def _divisor(f: float) -> Optional[int]:
    """K when ``f`` is 1/K for an integer K >= 2, else None."""
    k = round(1.0 / f)
    return k if k >= 2 and abs(f * k - 1) <= _TOL else None


def _detail(view_name: str, n: int, k: int, full: int, site, here, seen: str, weight: Optional[float] = None) -> str:
    if weight is None or abs(weight * full - 1) <= _TOL:
        return (f"{view_name}.step() (step {n}) used {plural(k, 'backward pass', 'backward passes')} of the "
                f"mean-reduced loss at {at(site, here)}, each divided by {full} like the {seen}, so its "
                f"gradient is {k}/{full} of the mean over its items.")
    return (f"{view_name}.step() (step {n}) used {plural(k, 'backward pass', 'backward passes')} of the mean-reduced "
            f"loss at {at(site, here)}, each weighted 1/{round(1 / weight)} like the passes of the {seen}, so its "
            f"gradient is {k}/{full} of what each of those windows applied.")


def _uneven(view: StepView, state: State) -> None:
    """Steps of one optimizer fed by different numbers of passes, every pass (of any line) times the same
    1/K, none of them by K: the windows are not the K micro-batches their losses were divided for (a step
    condition that closes them at the wrong micro-batches). Each is k/K of the mean over its items, and two
    sizes cannot both be right; a constant divisor for another reason with one pass per step shows one size
    only. Reported once, at the first such step, when a second size shows."""
    group = list(view.passes.values())
    if not group or any(i in state.declared for i in view.passes):
        return
    for ps in group:  # (a framework's backward is judged by the factor it gave the graph, as the user's)
        info = ps.info
        if ps.managed or ps.retained or info.amp or info.kind != "mean" or info.factor is None:
            return
    f = group[0].info.factor
    if f <= 0 or any(abs(ps.info.factor - f) > _TOL * f for ps in group):
        return
    full = _divisor(f)
    if full is None:
        return
    key = (id(view.ost), full)
    k = len(group)
    if k >= full:
        state.sized_full.add(key)
        state.sizes.pop(key, None)
        return
    if key in state.sized_full:
        return  # short windows after full ones: the per-line judgement above
    sizes = state.sizes.setdefault(key, {})
    if sizes is None or k in sizes:
        return
    sizes[k] = (view.n, view.with_grad, group[0].site)
    if len(sizes) < 2 or max(sizes) < 2:
        return
    n, params, site = min(sizes.values(), key=lambda v: v[0])
    state.sizes[key] = None  # once
    counts = " and ".join(str(c) for c in sorted(sizes, reverse=True))
    view.report(
        CODE,
        f"{view.name}.step() closed windows of {counts} backward passes (from step {n}; step {view.n} is "
        f"the second size), every loss divided by {full} as if each window held {full}: each update is only "
        f"k/{full} of the mean over its micro-batches, and no window holds {full} passes. The step runs on the "
        f"wrong micro-batches.",
        site, n, params,
    )


def at_discard(view) -> None:
    """A clearing threw a pass away before any step: it still counts in its step interval's window."""
    if view.ps.moved():
        return  # its gradient was used by hand before the clearing (SAM's perturbation): not thrown away
    state: State = view.memory[CODE]
    key = (view.ps.site, id(view.ost))
    j = view.ost.steps
    entry = state.cut.get(key)
    if entry is None or entry[0] != j:
        entry = state.cut[key] = (j, [])
    if entry[1] is not None:
        entry[1].append(view.ps)
        if len(entry[1]) > _MAX_CUT:
            state.cut[key] = (j, None)  # too many to be one window: not judged


def at_step(view: StepView) -> None:
    state = view.memory[CODE]
    if state.declared:
        _framework_step(view, state)
    else:
        _uneven(view, state)
    grad = None
    for site, group in view.by_site().items():
        if grad is None and not any(ps.info.amp for ps in group):
            grad = view.grad_factor_unsynced  # (a window averaged on its gradients: `p.grad /= K`)
        key = (site, id(view.ost))
        # The window is every pass of the line in this step interval: those applied, and those a clearing
        # threw away before the step (a clearing before every micro-batch: GG102's), each weighted as the
        # applied ones would have been. (The applied ones come last: a grad factor applies to them.)
        cut = state.cut.pop(key, None)
        cut = cut[1] if cut is not None and cut[0] == view.ost.steps else []
        if cut is None:
            continue
        f = _factor(cut + group, grad)
        if f is None:
            continue
        k = len(group) + len(cut)
        full = state.full.get(key)
        if full is not None and k < full:
            weight = state.weight[key]
            if abs(f - weight) <= _TOL * weight and f * k < 1:
                # weighted like each pass of the larger windows before it: k/full of what those apply
                view.report(CODE, _detail(view.name, view.n, k, full, site, site, f"earlier windows of {full} passes",
                                          weight), site, view.n, view.with_grad)
                continue
        m = _times(f, k) if k >= 2 else None
        if m == 1 or (m is not None and (full is None or k >= full)):
            # a full window: each pass divided by the window's size (m > 1: and again, GG113's); with m > 1,
            # only the largest window so far (2 passes of 1/4 are as well the short window of a loop of 4)
            state.full[key] = k
            state.weight[key] = f
            early = state.waiting.pop(key, {}).get(k) if m == 1 else None
            if early is not None:  # a short window before this one, divided by this one's size
                n, k_early, params = early
                view.report(CODE, _detail(view.name, n, k_early, k, site, site, f"later window of {k} passes (step {view.n})"),
                            site, n, params)
            if m == 1:
                continue
        if full is not None:
            continue
        # No full window yet: 1/K with fewer than K passes is a short window only if a full one follows.
        divisor = _divisor(f)
        if divisor is not None and k < divisor:
            waiting = state.waiting.setdefault(key, {})
            if divisor not in waiting and len(waiting) < _MAX_WAITING:
                waiting[divisor] = (view.n, k, view.with_grad)


def _framework_step(view: StepView, state: State) -> None:
    """A step of a framework's loop whose passes were each divided by the framework's K."""
    marks = [state.declared.get(i) for i in view.passes]
    if not marks or any(m is None for m in marks):
        return  # not only the framework's passes: their weights are not the framework's alone
    if any(ps.managed for ps in view.passes.values()):
        return  # weighted exactly by gradguard (ExactAccumulation)
    full, origin, advice = marks[0]
    k = len(marks)
    if full < 2 or k >= full or any(m[0] != full for m in marks):
        return
    site = origin if origin is not None and origin[0] is not None else next(iter(view.passes.values())).site
    view.report(
        CODE,
        f"{view.name}.step() (step {view.n}) closed a window of {plural(k, 'backward pass', 'backward passes')} "
        f"whose losses the framework divided by its window size accumulate_grad_batches={full} (set at "
        f"{at(site, site)}), stepping on the epoch's last batch, so this update is {k}/{full} of the mean over its "
        f"micro-batches.",
        site, view.n, view.with_grad, advice,
    )
