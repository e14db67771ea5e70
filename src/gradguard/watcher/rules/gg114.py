"""GG114 leaked pass: the first step applied a pass that is none of the loop's own, on top of the window's.

An optimizer's first two steps tell the loop's lines: a line whose passes fed
both is the loop's. A line whose passes fed the first step only, all of them
made before the first of that window's loop-line passes, is a pass from before
the loop (or from evaluation code run before training) that nothing cleared.
Judged once per optimizer, at its second step, and reported as of step 1 at
the stray pass's line once that line has stayed out of the next steps too (or
at the end): a line in one branch of a step condition that closes windows at the
wrong micro-batches also feeds step 1 alone, then comes back. Passes weighted by gradguard or made through a
framework's code are left out (a framework's own passes are its business).

Evaluation code leaking into a later step (a loss function that back-propagates
whether or not it has an optimizer, run on validation batches with the model in
``eval()`` mode) shows by the mode the models were in: each pass is marked with
the top-level models seen running that were in ``eval()`` mode when it started. A
step that applies passes made with more models in ``eval()`` mode than any pass an
earlier step of that optimizer applied, together with passes in a mode its
earlier steps applied, mixes evaluation passes into a training window: reported
at that step, at the evaluation passes' line. A loop that trains in ``eval()``
mode throughout (frozen batch-norm statistics) applies that mode from its first
step on, and one that switches to it for good applies no mixed step: neither
is reported. Judged only once the optimizer has stepped before (its own mode is
known), and once per optimizer.

A leftover window leaking into the next one shows by the passes' weights. Per
backward line and optimizer, a step fed by K >= 2 passes of that line, each a
mean-reduced loss multiplied by the same known factor 1/K (read from the
loss's autograd graph), shows that the loop divides each micro-batch by its
window size K. A later step of that optimizer fed by K + r passes of the line
(0 < r < K), each still times 1/K, applied r passes that no window of K
accounts for: a partial window that never stepped (an epoch that ended inside a
window, with the step counter reset for the next epoch) and that nothing
cleared, added to the next window's own. Its gradient is (K + r)/K of the
mean. Reported at that step, once per line and optimizer. Passes weighted by
gradguard, made through a framework's code, scaled by a ``GradScaler``,
keeping their graph, or whose factor the graph does not show are not judged,
and a window of 2K or more (two windows in one step) is not this reading.
"""

from __future__ import annotations

from typing import Dict, Optional

from .._view import StepView, at, plural

CODE = "GG114"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_step": 60, "at_end": 15}
_WAIT = 4  # later steps a stray line must stay out of before it is reported (else at the end)


class State:
    """Per optimizer (by its state's id): the passes its first step applied, as (index, site)."""

    def __init__(self, clock=None):
        self.first: dict = {}
        self.done: set = set()
        self.models: list = []  # the modules seen running (their roots are the models)
        self._roots: Optional[list] = None
        self.mode: Dict[int, frozenset] = {}  # pass index -> ids of the models in eval() mode when it started
        self.applied: Dict[int, set] = {}  # id(optimizer state) -> the modes its steps applied
        self.eval_done: set = set()
        self.pending: dict = {}  # id(optimizer state) -> (stray lines, detail, site, params): to be confirmed
        #: (backward line, id(optimizer state)) -> (K, the weight 1/K of each pass) of its full windows;
        #: None once a leftover was reported there
        self.windows: Dict[tuple, Optional[tuple]] = {}

    def evaluation(self, ost, index, mode: bool = False) -> bool:
        """Pass ``index`` (with ``mode``: a pass's mode) was made with more models in eval() mode than any pass
        ``ost``'s steps applied."""
        m = index if mode else self.mode.get(index)
        before = self.applied.get(id(ost))
        return bool(m and before) and m not in before and any(b < m for b in before) and not any(m <= b for b in before)

    def on_module(self, module) -> None:
        self.models.append(module)
        self._roots = None

    def before_pass(self, ps) -> None:
        if not self.models:
            return
        if self._roots is None:
            children = {id(sub) for m in self.models for sub in m.modules() if sub is not m}
            self._roots = [m for m in self.models if id(m) not in children]
        self.mode[ps.index] = frozenset(id(m) for m in self._roots if not m.training)
        self._bound()

    def after_step(self, ost, passes, by_hand) -> None:
        if ost.steps == 0 and id(ost) not in self.first:
            self.first[id(ost)] = [(ps.index, ps.site) for ps in passes.values() if not ps.managed and not ps.framework]
        modes = self.applied.setdefault(id(ost), set())
        # An evaluation pass applied with training ones does not make its mode the loop's own; a step that
        # applies only passes of a new mode does (a loop switched to eval() mode for good).
        seen = [m for m in map(self.mode.get, passes) if m is not None]
        add = [m for m in seen if not self.evaluation(ost, m, True)]
        modes.update(add if add else seen)
        if passes and self.mode:
            last = max(passes)
            self.mode = {i: m for i, m in self.mode.items() if i > last}

    def _bound(self) -> None:
        if len(self.mode) > 4096:  # passes no step applies (a program that only computes gradients)
            self.mode = dict(list(self.mode.items())[-1024:])


def _evaluation_passes(view: StepView, state: State) -> None:
    """A step mixing passes made with more models in eval() mode than its optimizer ever applied (see the
    module's docstring) with passes of a mode it applied before."""
    key = id(view.ost)
    before = state.applied.get(key)
    if not before or key in state.eval_done:
        return
    mine = [(i, ps, state.mode.get(i)) for i, ps in view.passes.items() if not ps.managed and not ps.framework]
    known = [m for _, _, m in mine if m in before]
    if not known:
        return
    stray = [(i, ps) for i, ps, m in mine
             if m is not None and m not in before and any(k < m for k in known) and not any(m <= b for b in before)]
    if not stray:
        return
    state.eval_done.add(key)
    site = stray[0][1].site
    own = next(ps.site for i, ps, m in mine if m in before)
    view.report(
        CODE,
        f"{view.name}.step() (step {view.n}) applied {plural(len(stray), 'backward pass', 'backward passes')} made at "
        f"{at(site, site)} while the model was in eval() mode (evaluation code), on top of the training pass at "
        f"{at(own, site)}: nothing cleared .grad between them, and no earlier step applied such a pass.",
        site, view.n, view.with_grad,
    )


_TOL = 1e-6


def _weight(group) -> Optional[float]:
    """The one known weight of every pass in ``group`` (mean-reduced losses times the same factor), else None."""
    f = None
    for ps in group:
        info = ps.info
        if ps.managed or ps.framework or ps.retained or info.amp or info.kind != "mean" or info.factor is None:
            return None
        if f is None:
            f = info.factor
        elif abs(info.factor - f) > _TOL * abs(f):
            return None
    return f if f is not None and f > 0 else None


def _leftover(view: StepView, state: State) -> None:
    """A step fed by K + r passes of a line whose full windows are K passes of 1/K each (see the module's
    docstring)."""
    for site, group in view.by_site().items():
        key = (site, id(view.ost))
        known = state.windows.get(key, ())
        if known is None:
            continue  # reported there already
        f = _weight(group)
        if f is None:
            continue
        k = len(group)
        if k >= 2 and abs(f * k - 1) <= _TOL:
            state.windows[key] = (k, f)  # a full window: each pass divided by the window's size
            continue
        if not known:
            continue
        full, weight = known
        if full < k < 2 * full and abs(f - weight) <= _TOL * weight:
            state.windows[key] = None
            r = k - full
            view.report(
                CODE,
                f"{view.name}.step() (step {view.n}) applied {k} backward passes of the mean-reduced loss at "
                f"{at(site, site)}, each divided by {full} like the earlier windows of {full} passes: "
                f"{plural(r, 'pass', 'passes')} left from a window that never stepped (nothing stepped or cleared "
                f"after {'it' if r == 1 else 'them'}) leaked into this window, so its gradient is {k}/{full} of the mean.",
                site, view.n, view.with_grad,
            )


def at_step(view: StepView) -> None:
    state: State = view.memory[CODE]
    if state.mode:
        _evaluation_passes(view, state)
    _leftover(view, state)
    key = id(view.ost)
    waiting = state.pending.get(key)
    if waiting is not None:
        if any(ps.site in waiting[0] for ps in view.passes.values()):
            del state.pending[key]  # the line runs inside the loop after all (a branch of the step condition)
        elif view.n >= 2 + _WAIT:
            _report(view.report, state.pending.pop(key))
        return
    if view.n != 2 or key in state.done or key not in state.first:
        return
    state.done.add(key)
    first = state.first.pop(key)
    second = {ps.site for ps in view.passes.values() if not ps.managed and not ps.framework}
    loop_lines = {site for _, site in first if site in second}
    if not loop_lines:
        return
    start = min(i for i, site in first if site in loop_lines)
    stray = [(i, site) for i, site in first if site not in second]
    if not stray or any(i > start for i, _ in stray):
        return  # a line that also ran inside the window (an extra loss on the first iteration): not judged
    site = stray[0][1]
    loop_site = next(s for i, s in first if i == start)
    detail = (f"{view.name}.step() (step 1) applied {plural(len(stray), 'backward pass', 'backward passes')} made at "
              f"{at(site, site)} before the loop's own passes (at {at(loop_site, site)}), which no later step applies: "
              "nothing cleared .grad between them.")
    # Decided once the line has stayed out of the loop's steps for a while (or at the end): a line in one
    # branch of a step condition that closes windows at the wrong micro-batches feeds step 1, skips step 2,
    # and comes back.
    state.pending[key] = ({s for _, s in stray}, detail, site, list(view.with_grad))


def _report(report, pending) -> None:
    _, detail, site, params = pending
    report(CODE, detail, site, 1, params)


def at_end(view) -> None:
    state: State = view.memory[CODE]
    for key in list(state.pending):
        _report(view.report, state.pending.pop(key))
