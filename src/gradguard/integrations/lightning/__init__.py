"""Exact gradient accumulation and the run-time watch for PyTorch Lightning.

``Trainer(accumulate_grad_batches=K)`` divides every micro-batch's loss by K:
micro-batches with different numbers of items (tokens) weigh the same, and
the epoch's final partial window of m < K micro-batches is still divided by K
(its gradient is m/K of the mean). :class:`ExactAccumulation` repairs both
without touching the user's ``training_step``::

    trainer = L.Trainer(accumulate_grad_batches=8,
                        callbacks=[ExactAccumulation(count_fn=lambda b: int((b["labels"] != -100).sum()))])

How: for the fit, the callback routes the precision plugin's ``backward``
(the call that runs ``loss.backward()``, after Lightning divided the loss by K
and, under 16-mixed, scaled it) through itself, and starts that backward pass
from the micro-batch's item count (over a reference count, so that
magnitudes stay near a plain mean's, which matters for fp16 gradients)
instead of 1: ``loss.backward(gradient=weight)``, nothing added to the graph
and no Python in the backward pass (a module that overrides ``backward``
gets the loss times the weight).
``on_before_backward`` hooks and the module's own ``backward`` run as usual.
``on_before_optimizer_step`` runs on the stepping micro-batch after AMP
unscaling and before Lightning's gradient clipping: there the summed gradient
is multiplied once by ``ref * K * world_size / N`` (N: the window's item
count over all ranks, one all-reduce per window), which makes it the exact
full-window mean; clipping then clips the exact gradient. The factor is
exactly 1 (and skipped) for full windows of equal counts.

Without the callback, a running :class:`gradguard.watch` reports the short
window (GG111): :class:`WatchAccumulationWindows`, which Lightning adds to every
``Trainer`` made while a watch runs (an entry point of this package), tells the
watch the divisor K of each of Lightning's backward passes.
"""

from .. import require

require("lightning", "lightning")

# Each job in its own module; the names users import (and the entry point's watch_callbacks) stay here.
from .exact import ExactAccumulation, default_count  # noqa: E402
from .watch import Watch, WatchAccumulationWindows, watch_callbacks  # noqa: E402

__all__ = ["ExactAccumulation", "Watch", "WatchAccumulationWindows", "default_count"]
