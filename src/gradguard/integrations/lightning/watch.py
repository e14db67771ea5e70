"""The run-time watch inside Lightning: the window divisor it declares (GG111) and the Watch callback."""

from __future__ import annotations

from typing import Optional

import torch
from lightning.pytorch.callbacks import Callback

from ..._channel import framework_divisor, listening
from ...watcher import user_site
from .._watch import FrameworkWatch, loss_line

__all__ = ["Watch", "WatchAccumulationWindows", "watch_callbacks"]


_LIGHTNING_ADVICE = {
    "GG105": (
        "Lightning divides every micro-batch's mean loss by accumulate_grad_batches alike (and the epoch's final "
        "partial window too): add gradguard.integrations.lightning.ExactAccumulation(count_fn=<items in a batch>) "
        "to Trainer(callbacks=[...]) to weight each micro-batch by its item count."
    ),
    "GG104": (
        "In automatic optimization Lightning scales the loss itself: return the micro-batch's mean loss from "
        "training_step and use Trainer(accumulate_grad_batches=K) with gradguard.integrations.lightning.ExactAccumulation()."
    ),
}


_WINDOW_ADVICE = (
    "Add gradguard.integrations.lightning.ExactAccumulation() to Trainer(callbacks=[...]): it weighs every window "
    "exactly, the epoch's short last window too; or make the number of batches per epoch a multiple of "
    "accumulate_grad_batches."
)


class WatchAccumulationWindows(Callback):
    """Tell a running :class:`gradguard.watch` that Lightning divided each backward pass's loss by K.

    In automatic optimization Lightning divides every ``training_step`` loss by
    ``trainer.accumulate_grad_batches`` = K and steps on the last batch of the
    epoch whatever the window holds, so that window (or a whole epoch shorter
    than K) is applied at K'/K of its mean. The watch sees the passes and the
    steps, but not K: this callback declares it around each of Lightning's
    backward passes, and the watch reports a step that closes a window of
    fewer than K passes (GG111) at ``origin``, the line where the ``Trainer``
    was made (else at the pass's line).

    Installed by itself into every ``Trainer`` made while a watch runs (the
    ``gradguard run`` command, the pytest plugin, a ``with gradguard.watch():``
    block around the ``Trainer(...)`` call), through Lightning's
    ``lightning.pytorch.callbacks_factory`` entry point; :class:`Watch` does the
    same. It changes nothing in training, and does nothing when no watch runs,
    for ``accumulate_grad_batches=1``, manual optimization, or a strategy that
    accumulates itself (DeepSpeed).
    """

    def __init__(self, origin=None) -> None:
        self.origin = origin
        self._mark: Optional[framework_divisor] = None

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        self._close_window_mark()
        k = trainer.accumulate_grad_batches
        if (k < 2 or not listening() or not pl_module.automatic_optimization
                or trainer.strategy.handles_gradient_accumulation):
            return
        self._mark = framework_divisor(k, self.origin, _WINDOW_ADVICE)
        self._mark.__enter__()

    def on_after_backward(self, trainer, pl_module) -> None:
        self._close_window_mark()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._close_window_mark()

    def _close_window_mark(self) -> None:
        mark, self._mark = self._mark, None
        if mark is not None:
            mark.__exit__(None, None, None)


def watch_callbacks() -> list:
    """Lightning's ``lightning.pytorch.callbacks_factory`` entry point: the callbacks every new ``Trainer`` gets.

    While a :class:`gradguard.watch` runs, a :class:`WatchAccumulationWindows`
    whose findings point at the ``Trainer(...)`` line being run; otherwise none.
    """
    if not listening():
        return []
    return [WatchAccumulationWindows(origin=user_site(2))]


class Watch(WatchAccumulationWindows):
    """Run :class:`gradguard.watch` over ``trainer.fit(...)``.

    Findings about the loss point at the line of ``training_step`` that made
    it (not at the ``fit`` call), and their advice is Lightning's (the
    :class:`ExactAccumulation` callback), not a hand-written loop.

    Args:
        mode: ``"warn"``, ``"raise"`` or ``"record"`` (see :class:`gradguard.watch`).
        ignore: rule codes (or prefixes) not to report.

    Attributes:
        findings: the :class:`gradguard.Finding` list.

    >>> w = Watch(mode="record")
    >>> # L.Trainer(callbacks=[w]).fit(model, loader); print(w.findings)
    """

    def __init__(self, mode: str = "warn", ignore=()) -> None:
        super().__init__()
        self._fw = FrameworkWatch(mode, ignore, _LIGHTNING_ADVICE)

    @property
    def findings(self):
        return self._fw.findings

    def on_fit_start(self, trainer, pl_module) -> None:
        self._fw.start(loss_line(type(pl_module).training_step), trainer.optimizers)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._fw.stop()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._close_window_mark()
        self._fw.stop(exception)
