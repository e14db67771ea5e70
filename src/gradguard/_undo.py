"""Undoing a window's failed parts: a backward pass or a window end that raised (a mixin of ``Accumulator``).

Autograd writes each parameter's ``.grad`` once per pass, and version counters say exactly what
happened to a tensor, so a failure is either put back exactly or the window is discarded with an
error that says so: never a half-applied window.
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter, is_not
from typing import List, Optional

import torch

from ._channel import accumulator_clearing
from ._errors import GradguardError

grad_of = attrgetter("grad")


class Undo:
    """What to do when part of a window raised; mixed into ``Accumulator``."""

    def _undo_failed_backward(self) -> bool:
        """After a backward pass raised: True when ``.grad`` is as before it (a retry is exact).

        Autograd writes each parameter's ``.grad`` once per pass, with the pass's
        whole contribution, so a failed pass left some parameters complete and
        the rest untouched. Before the window's first contribution that is
        undone exactly from the marks taken then; later it is not separable
        from the window's sum, and the window is discarded.
        """
        w = self._w
        if not w.contributed and _restore_grads(self._params(), w.start_grads):
            return True
        self._drop_window()
        return False

    def _undo_end(self, exc: BaseException, grads: List[torch.Tensor], factor: float, before: list, after: Optional[list]) -> None:
        """A window's end raised before the optimizer stepped: put ``.grad`` back, or discard the window.

        Version counters tell exactly what happened to ``.grad``, wherever the
        exception (a KeyboardInterrupt lands between any two bytecodes) came from.
        """
        w = self._w
        now = [g._version for g in grads]
        if after is None or now == after:  # nothing but (maybe) the normalising multiply touched .grad
            if now != before:
                self._scale_grads(grads, factor, undo=True)
            if self._seen is not None:
                self._record()  # the undo and the window's reduction are the Accumulator's own
            w.end_failed = type(exc).__name__
            return
        # Unscaling or clipping rewrote .grad after the multiply: it cannot be put back.
        self._drop_window()
        if isinstance(exc, Exception):
            raise GradguardError(
                f"the update of window {self.optimizer_steps} failed ({type(exc).__name__}: {exc}) after clipping or the "
                "GradScaler had rewritten the gradients, which cannot be undone, so the window was discarded (nothing "
                "applied, its gradients cleared, skipped_windows + 1). Training can go on: the next backward() starts a new window"
            ) from exc


def grad_marks(params: List[torch.Tensor]) -> list:
    """Each parameter's .grad and its version counter ([] when every .grad is None)."""
    grads = list(map(grad_of, params))
    if not any(map(is_not, grads, repeat(None))):
        return []
    return [None if g is None else (g, g._version) for g in grads]


def _changed(p: torch.Tensor, mark) -> bool:
    if mark is None:
        return p.grad is not None
    g, version = mark
    return p.grad is not g or g._version != version


def reached_by_pass(params: List[torch.Tensor], marks: Optional[list]) -> bool:
    """Whether some backward of the window changed an optimizer parameter's .grad."""
    if marks is None:  # nothing was back-propagated (only 0-item micro-batches)
        return True
    if not marks:
        return any(p.grad is not None for p in params)
    return any(_changed(p, m) for p, m in zip(params, marks))


def _restore_grads(params: List[torch.Tensor], marks: Optional[list]) -> bool:
    """Put back the .grad recorded in ``marks``; False when a changed one cannot be restored."""
    marks = marks or [None] * len(params)
    if any(m is not None and _changed(p, m) for p, m in zip(params, marks)):
        return False  # an existing gradient was added to in place: what was added is unknown
    with accumulator_clearing():
        for p, m in zip(params, marks):
            if m is None:
                p.grad = None
    return True
