"""GG116 clip-not-applied: a clip of gradients that the next step of their optimizer does not apply.

Decided from the passes, never from names or lines: each clip of parameters
(``clip_grad_norm_``, ``clip_grad_value_``, ``clip_grads_with_norm_``, also as called by a
framework's own clipping; an infinite threshold is a norm read and left out) is noted with
the index of the last backward pass made before it. A clip of an optimizer's parameters
made after that optimizer's step with no backward pass since is reported at once, at the
clip (what it clipped was applied already, and the next step applies only later passes).
Otherwise the next step of an optimizer that holds some of those parameters with a
gradient, and that applies only passes made after the clip, applied a gradient the clip
never saw (the clip came after the clearing and before the backward pass, or after the
step with another pass in between); it is reported at the clip's line, before that step
reads ``.grad``. A clip between a pass and the step that applies it is
not; a clip inside an accumulation window (passes from before and after it) is GG115's.
"""

from __future__ import annotations

import weakref
from typing import Dict, List, Tuple

import torch

from .._view import StepView, at

CODE = "GG116"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_step": 75, "at_clip": 25, "at_end": 50}
#: Clips kept waiting for a step (a clip of parameters that no optimizer steps is forgotten after this many).
_KEEP = 64


class State:
    """The last backward pass's index, and the clips no step has judged yet."""

    def __init__(self, clock=None):
        self.last = -1  # index of the last backward pass made (-1: none yet)
        # (site, name, index of the last pass before the clip, id(parameter) -> a weak reference to it)
        self.clips: List[Tuple] = []
        # id(optimizer state) -> (that state, the index of the last pass made when it last stepped)
        self.stepped: Dict[int, Tuple] = {}
        # clips after a step with no pass since, reported at the next pass (or the watch's end): if the same
        # optimizer steps again first, that step applies the clipped, already applied gradient (GG101's)
        self.spent: List[Tuple] = []

    def before_pass(self, ps) -> None:
        self.last = ps.index
        if self.spent:  # a pass after a clip of spent gradient: the next step applies only later passes
            _flush(self)

    def after_step(self, ost, passes, by_hand) -> None:
        self.stepped[id(ost)] = (ost, self.last)
        if self.spent:
            self.spent = [s for s in self.spent if s[0] is not ost]
        # Judged at this step (at_step) or not, a clip of this optimizer's parameters is done with.
        if self.clips:
            held = {id(p) for p in ost.params}
            self.clips = [c for c in self.clips if held.isdisjoint(c[3])]


def at_clip(name: str, tensors, grads: bool, site, step_of, report, memory) -> None:
    state: State = memory[CODE]
    if grads or not name.startswith("clip"):
        # A norm read changes nothing; clip_grad_norm_ hands its gradients to the norm first and its
        # parameters to the clip next: the parameters are kept (they are there even where .grad is None).
        return
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    refs = {id(t): weakref.ref(t) for t in tensors if isinstance(t, torch.Tensor)}
    # After an optimizer's step, with no backward pass since: what it holds was applied (or cleared) already,
    # and the next step applies only later passes. Known now, at the clip: reported at once.
    for ost, last in state.stepped.values():
        if last == state.last >= 0 and not ost.ids.isdisjoint(refs):
            params = [p for p in ost.params if id(p) in refs]
            state.spent.append((ost, report, (
                CODE,
                f"{name}() ran after {ost.name}.step() (step {ost.steps}) with no backward pass since: it clipped "
                "gradients that step had already applied, and the next step applies only later passes, so no "
                "update is clipped.",
                site, ost.steps, params,
            )))
            return
    if refs:
        # A later clip of the same parameters is the one the next step's gradient went through last (an
        # LBFGS closure clips on each of its evaluations inside one step): the earlier one is done with.
        state.clips = [c for c in state.clips if c[3].keys().isdisjoint(refs)]
        state.clips.append((site, name, state.last, refs))
        del state.clips[:-_KEEP]


def at_step(view: StepView) -> None:
    state: State = view.memory[CODE]
    if not state.clips or not view.passes:
        return
    first = min(view.passes)
    for site, name, last, refs in state.clips:
        params = [p for p, g in zip(view.params, view.grads)
                  if g is not None and id(p) in refs and refs[id(p)]() is p]
        if not params or first <= last:
            continue  # not this optimizer's, or the clip saw (part of) what this step applies
        view.report(
            CODE,
            f"{name}() at {at(site, site)} clipped gradients that {view.name}.step() (step {view.n}) does not apply: "
            "the step applies only backward passes made after the clip (it ran after the step that used what it "
            "clipped, or before the backward pass), so the update was not clipped.",
            site, view.n, params,
        )
        return



def _flush(state: State) -> None:
    spent, state.spent = state.spent, []
    for _, report, args in spent:
        report(*args)


def at_end(view) -> None:
    state: State = view.memory[CODE]
    if state.spent:
        _flush(state)
