"""GG115 clip inside window: a step applied backward passes made both before and after a clip of its gradients.

Decided from the passes, never from names or lines: each clip of parameters
(``clip_grad_norm_``, ``clip_grad_value_``, also as called by a framework's own
clipping) is noted with the index of the last backward pass made before it. The
optimizer step that applies a pass made before that clip and a pass made after it,
on parameters the clip held, applied a gradient that was clipped while its
window was still open; it is reported at the clip's line, before the step reads
``.grad``. A clearing between the clip and the next pass drops the earlier passes
(no step applies them), so per-example clipping that moves each micro-batch's
gradient elsewhere and clears is not reported; nor is a clip once after the
window's last pass, or with one pass per step. A norm read alone
(``get_total_norm``) changes nothing and is left out.
"""

from __future__ import annotations

import weakref
from typing import List, Optional, Tuple

import torch

from .._view import StepView, at, plural

CODE = "GG115"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_step": 70, "at_clip": 20}
#: Clips kept waiting for their step (a clip that no step ever follows is forgotten after this many).
_KEEP = 64


class State:
    """The last backward pass's index, and the clips no step has applied yet."""

    def __init__(self, clock=None):
        self.last: Optional[int] = None  # index of the last backward pass made
        # (site, name, index of the last pass before the clip, id(.grad) -> a weak reference to that buffer)
        self.clips: List[Tuple] = []

    def before_pass(self, ps) -> None:
        self.last = ps.index

    def after_step(self, ost, passes, by_hand) -> None:
        # Applied: a clip of this optimizer's gradients was judged (at_step) and is done with.
        if self.clips:
            grads = {id(p.grad) for p in ost.params if p.grad is not None}
            self.clips = [c for c in self.clips if grads.isdisjoint(c[3])]


def at_clip(name: str, tensors, grads: bool, site, step_of, report, memory) -> None:
    state: State = memory[CODE]
    if not name.startswith("clip") or state.last is None:
        return  # a norm read alone leaves .grad as it is
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    # clip_grad_norm_ hands its gradients (read through its norm), clip_grad_value_ its parameters. The
    # buffers are followed by identity: a window adds into the same .grad; a clearing replaces or empties it.
    held = [t if grads else t.grad for t in tensors if isinstance(t, torch.Tensor)]
    refs = {id(g): weakref.ref(g) for g in held if g is not None}
    if refs:
        state.clips.append((site, name, state.last, refs))
        del state.clips[:-_KEEP]


def at_step(view: StepView) -> None:
    state: State = view.memory[CODE]
    if not state.clips:
        return
    indices = sorted(view.passes)
    for site, name, last, refs in state.clips:
        params = [p for p, g in zip(view.params, view.grads)
                  if g is not None and id(g) in refs and refs[id(g)]() is g]
        if not params:
            continue
        before = [i for i in indices if i <= last]
        after = [i for i in indices if i > last]
        if not before or not after:
            continue  # the clip saw the whole window (or none of it): what the step applies was clipped once
        view.report(
            CODE,
            f"{name}() at {at(site, site)} clipped the gradient of {plural(len(before), 'backward pass', 'backward passes')} "
            f"that {view.name}.step() (step {view.n}) applied together with {plural(len(after), 'later pass', 'later passes')}"
            " of the same window: the step's gradient was clipped while the window was open.",
            site, view.n, params,
        )
        return
