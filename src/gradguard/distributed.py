"""How an :class:`~gradguard.Accumulator` talks to other processes.

The accumulator keeps the window's bookkeeping; a *sync* object decides what
crosses process boundaries. :class:`LocalSync` is the one-process case
(nothing to do). :func:`sync_for` picks the right one for the ``model`` the
user passed.

The contract a sync object honours (the accumulator calls nothing else):

* ``world_size``: number of ranks whose data form one window.
* ``grads_averaged``: True when the framework divides reduced gradients by
  ``world_size`` (DDP, FSDP2 by default), so the accumulator multiplies that
  factor back in when it normalises by the global item count.
* ``microbatch(ends_window)``: context manager around one micro-batch's
  forward and backward; suppresses gradient sync unless ``ends_window``.
* ``empty_backward(params)``: called instead of back-propagating a micro-batch
  with 0 items when that micro-batch must still take part in gradient sync.
* ``reduce_sum(t)``: sum of a small tensor over ranks (one collective).
* ``finish_window(params, last_synced)``: at the window's end, make every
  rank's gradients the reduced ones even if the last micro-batch ran without
  sync (a partial window stepped by ``flush()``).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import ContextManager, List

import torch


class LocalSync:
    """One process: nothing to synchronise."""

    world_size = 1
    grads_averaged = False
    #: True when `empty_backward` must run for a 0-item micro-batch.
    needs_empty_backward = False

    def microbatch(self, ends_window: bool) -> ContextManager:
        return nullcontext()

    def empty_backward(self, params: List[torch.Tensor]) -> None:
        pass

    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def finish_window(self, params: List[torch.Tensor], last_synced: bool) -> None:
        pass


def sync_for(model) -> LocalSync:
    """The sync object for ``model`` (``None``, a plain module, DDP or FSDP2)."""
    return LocalSync()
