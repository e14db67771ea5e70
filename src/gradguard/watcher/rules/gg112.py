"""GG112 clip before unscale: a clip (or a norm read) of gradients still multiplied by a GradScaler's scale.

The rule follows the scale into the buffers: after a backward pass of a loss
that ``GradScaler.scale`` returned, the ``.grad`` tensors that pass reached hold
scaled gradient until ``scaler.unscale_(optimizer)`` divides them (the one
``scaler.step`` makes, too), a watched step applies them or a clearing replaces
them. A clipping function called on one of those tensors in that interval is
reported at its line, before it runs. The buffers are held by weak reference
and compared by identity: a buffer freed and another made at the same address
is not taken for it. Only passes of scaled losses cost anything here.
"""

from __future__ import annotations

import weakref
from typing import Dict, Optional

import torch

from .._view import plural

CODE = "GG112"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_clip": 10}


class State:
    """The ``.grad`` buffers holding scaled gradient no ``unscale_`` has divided since, and the scaler."""

    def __init__(self, clock=None):
        self.scaled: Dict[int, "weakref.ref[torch.Tensor]"] = {}  # id(.grad) -> a weak reference to it
        self.owner: Dict[int, torch.Tensor] = {}  # id(.grad) -> its parameter
        self.version: Dict[int, int] = {}  # id(.grad) -> its _version right after the scaled pass
        self.scaler = None  # the GradScaler whose scale is in them (a weak reference)

    def after_scaled_pass(self, params, scaler) -> None:
        """A pass of a loss ``scaler.scale`` returned put its gradient into these parameters' ``.grad``."""
        for p in params:
            g = p.grad
            if g is not None:
                self.scaled[id(g)] = weakref.ref(g)
                self.owner[id(g)] = p
                self.version[id(g)] = g._version
        if scaler is not None:
            self.scaler = weakref.ref(scaler)

    def unscaled(self, params) -> None:
        """``unscale_`` (or a step, or a clearing) of these parameters: their ``.grad`` holds no scale now."""
        if not self.scaled:
            return
        for p in params:
            g = p.grad
            if g is not None:
                self.scaled.pop(id(g), None)
                self.owner.pop(id(g), None)
                self.version.pop(id(g), None)

    def after_step(self, ost, passes, by_hand) -> None:
        self.unscaled(ost.params)

    def after_clearing(self) -> None:
        # zero_grad(set_to_none=True) replaced the buffers (their weak references die or point elsewhere);
        # a zero-fill keeps them but changes them in place (their version): either way no scale is left.
        if self.scaled:
            self.scaled = {k: r for k, r in self.scaled.items() if _holds(r, self.owner.get(k), self.version.get(k))}
            self.owner = {k: self.owner[k] for k in self.scaled}
            self.version = {k: self.version[k] for k in self.scaled}

    def still_scaled(self, tensors, grads: bool) -> list:
        """Of ``tensors`` (gradients, or parameters whose ``.grad`` is meant), those holding the scale."""
        if not self.scaled:
            return []
        out = []
        for t in tensors:
            g = t if grads else t.grad
            r = self.scaled.get(id(g)) if g is not None else None
            if r is not None and r() is g:
                out.append(self.owner.get(id(g), t))
        return out

    def scale(self) -> Optional[float]:
        scaler = self.scaler() if self.scaler is not None else None
        try:
            return float(scaler.get_scale()) if scaler is not None else None
        except Exception:
            return None


def _holds(ref, p, version) -> bool:
    g = ref()
    return g is not None and p is not None and p.grad is g and g._version == version


def at_clip(name: str, tensors, grads: bool, site, step_of, report, memory) -> None:
    """``name`` (``clip_grad_norm_``, ``clip_grad_value_``, ``get_total_norm``) is about to read ``tensors``;
    ``step_of(parameter)``: the number of the step that will apply its gradient (None if not known)."""
    state: State = memory[CODE]
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    held = state.still_scaled(tensors, grads)
    if not held:
        return
    step = step_of(held[0])
    scale = state.scale()
    factor = f" (the scale is {scale:g} now)" if scale is not None else ""
    when = f" before step {step}" if step is not None else ""
    report(
        CODE,
        f"{name}(){when} read {plural(len(held), 'gradient')} still multiplied by the GradScaler's scale{factor}: "
        "no scaler.unscale_(optimizer) ran after the scaled backward pass.",
        site, step, held,
    )
