"""Exact gradient accumulation: :class:`Accumulator`.

The full-batch gradient of a mean loss over N items is ``sum_i n_i * grad(mean_i) / N``
where micro-batch i averages over n_i items. Dividing every micro-batch's mean by
the number of micro-batches (what HF Accelerate, Lightning and DeepSpeed do) is
exact only when every n_i is equal; with token-level losses over variable-length
sequences it is off by tens of percent. The accumulator therefore back-propagates
each micro-batch's loss times its item count and normalises the summed gradient
once, when the window ends and its total is known: no look-ahead, so it works on
streaming data (the torchtune recipe: multiply by the token count, scale once).

To keep that extra pass off the common path, each loss is scaled by
``n_i / (ref * steps)`` where ``ref`` is the mean count per micro-batch of the
previous window (the first window uses its first count; a distributed first
window uses 1, the same on every rank). When every micro-batch of a full window
has the same count as before, the end-of-window factor ``ref * steps / N`` is
exactly 1 and the pass is skipped (``loss / steps`` is already exact then). The
same scaling keeps gradient magnitudes near those of a single mean loss, which
matters for fp16 gradients under a GradScaler. ``ref`` only sets the scale of
the in-flight sum; the result is exact whatever it is.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from numbers import Real
from typing import Iterator, List, Optional, Union

import torch

from ._errors import GradguardError
from .distributed import sync_for
from .watcher._marks import accumulator_backward, accumulator_clearing

_FORMAT = "gradguard.Accumulator/1"
_STATE_KEYS = frozenset({
    "format", "steps", "micro", "has_backward", "counted", "ref", "total", "loss_sum", "bad",
    "optimizer_steps", "skipped_windows", "last_loss", "ref_hint", "hint_counted", "normalised", "grads",
})
_NONFINITE_MODES = ("raise", "skip")
_REDUCTIONS = ("mean", "sum")

Count = Union[int, float, torch.Tensor, None]


class Accumulator:
    """Exact gradient accumulation over ``steps`` micro-batches per optimizer step.

    Each micro-batch: ``acc.backward(loss, count=n)`` then ``acc.step()``. When
    ``steps`` micro-batches are in, the accumulated gradient is normalised to the
    exact full-window mean, then (unscale, clip) optimizer step, scheduler step,
    and the gradients are cleared. ``acc.flush()`` steps a final partial window
    with its true weights.

    Args:
        optimizer: the ``torch.optim.Optimizer`` whose parameters accumulate.
        steps: micro-batches per optimizer step (>= 1).
        model: the model; a ``DistributedDataParallel`` or FSDP2 (``fully_shard``)
            model makes ``acc.microbatch()`` defer gradient sync to the window's end.
        scheduler: an LR scheduler, stepped once per optimizer step that happened.
        scaler: a ``torch.amp.GradScaler``; losses are scaled, gradients unscaled
            before clipping, and a step the scaler skips does not step the scheduler.
        max_grad_norm: clip the total gradient norm to this value before stepping.
        set_to_none: how gradients are cleared after a step (``zero_grad(set_to_none=...)``).
        nonfinite: ``"raise"`` (default) raises :class:`GradguardError` in
            ``backward()`` for a NaN/Inf loss, before it touches ``.grad`` (this
            reads one value from the device per micro-batch); ``"skip"`` drops
            the whole window that contained it instead, checked once per window.

    Raises:
        GradguardError: for ``steps`` < 1, a non-optimizer, or a bad ``max_grad_norm``.

    >>> import torch, gradguard as gg
    >>> model = torch.nn.Linear(3, 1)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> acc = gg.Accumulator(opt, steps=2)
    >>> for n in (3, 5):                        # micro-batches of unequal size
    ...     x, y = torch.randn(n, 3), torch.randn(n, 1)
    ...     acc.backward(torch.nn.functional.mse_loss(model(x), y), count=n)
    ...     stepped = acc.step()
    >>> stepped
    True
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        steps: int,
        *,
        model: Optional[torch.nn.Module] = None,
        scheduler=None,
        scaler=None,
        max_grad_norm: Optional[float] = None,
        set_to_none: bool = True,
        nonfinite: str = "raise",
    ) -> None:
        if not (hasattr(optimizer, "param_groups") and callable(getattr(optimizer, "step", None))):
            raise GradguardError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}: "
                "pass the optimizer whose parameters accumulate, e.g. Accumulator(torch.optim.AdamW(model.parameters()), steps=4)"
            )
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise GradguardError(f"steps must be an int >= 1 (micro-batches per optimizer step), got {steps!r}")
        if max_grad_norm is not None and (
            isinstance(max_grad_norm, bool) or not isinstance(max_grad_norm, Real) or not max_grad_norm > 0 or math.isinf(max_grad_norm)
        ):
            raise GradguardError(f"max_grad_norm must be a positive finite number or None, got {max_grad_norm!r}")
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            raise GradguardError(
                "scheduler is a ReduceLROnPlateau, which steps on a metric (usually a validation loss, once per epoch): "
                "do not pass it to the Accumulator; call scheduler.step(val_loss) yourself"
            )
        if scheduler is not None and not callable(getattr(scheduler, "step", None)):
            raise GradguardError(f"scheduler must have a step() method (an LR scheduler), got {type(scheduler).__name__}")
        if nonfinite not in _NONFINITE_MODES:
            raise GradguardError(f"nonfinite must be one of {_NONFINITE_MODES}, got {nonfinite!r}")
        self.optimizer = optimizer
        self.steps = steps
        self.model = model
        self.scheduler = scheduler
        self.scaler = scaler
        self.max_grad_norm = max_grad_norm
        self.set_to_none = set_to_none
        self.nonfinite = nonfinite
        self._sync = sync_for(model)

        #: optimizer steps taken (windows that stepped).
        self.optimizer_steps = 0
        #: windows dropped: a non-finite loss under ``nonfinite="skip"``, a
        #: window with 0 items in total, or a step skipped by the GradScaler.
        self.skipped_windows = 0
        #: total gradient norm before clipping of the last window (a tensor), when ``max_grad_norm`` is set.
        self.grad_norm: Optional[torch.Tensor] = None
        self._last_loss: Union[torch.Tensor, float, None] = None
        # Mean count per micro-batch of the last window, and whether it was counted:
        # the next window's scale reference (see the module docstring).
        self._ref_hint: Optional[float] = None
        self._hint_counted: Optional[bool] = None
        self._reset_window()

    # ------------------------------------------------------------------ window
    def _reset_window(self) -> None:
        self._micro = 0  # micro-batches ended (step() called) in this window
        self._has_backward = False  # backward() done for the current micro-batch
        self._counted: Optional[bool] = None  # whether this window's micro-batches pass counts
        self._ref: Optional[float] = None  # the scale reference (see the module docstring)
        self._total: float = 0  # items in this window so far, on this rank
        self._loss_sum: Optional[torch.Tensor] = None  # sum of per-item losses (device, no sync)
        self._bad: Optional[torch.Tensor] = None  # any non-finite loss ("skip" mode, device flag)
        self._in_no_sync = False  # inside microbatch() that defers gradient sync
        self._last_synced = True  # did the last backward run with gradient sync?
        self._normalised = False  # the end-of-window factor is in .grad (a retried step must not apply it twice)

    @property
    def micro_step(self) -> int:
        """Micro-batches already ended in the current window (0 .. steps-1)."""
        return self._micro

    @property
    def loss(self) -> Optional[float]:
        """The exact mean loss (weighted by counts) of the last window that stepped; None before.

        Kept on the device until read, so training pays no host sync for it.
        """
        if isinstance(self._last_loss, torch.Tensor):
            self._last_loss = float(self._last_loss)
        return self._last_loss

    def _params(self) -> List[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    # -------------------------------------------------------------- backward
    @contextmanager
    def microbatch(self) -> Iterator[None]:
        """Wrap one micro-batch's forward and backward.

        With a DDP or FSDP2 ``model`` this suppresses gradient sync unless this
        micro-batch ends the window (one reduction per optimizer step); without
        one it does nothing.

        >>> import torch, gradguard as gg
        >>> model = torch.nn.Linear(2, 1)
        >>> acc = gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.1), steps=2)
        >>> with acc.microbatch():
        ...     acc.backward(model(torch.ones(1, 2)).sum())
        >>> acc.step()
        False
        """
        ends_window = self._micro + 1 >= self.steps
        self._in_no_sync = not ends_window and self._sync.defers_sync
        try:
            with self._sync.microbatch(ends_window):
                yield
        finally:
            self._in_no_sync = False

    def backward(self, loss: torch.Tensor, *, count: Count = None, reduction: str = "mean") -> None:
        """Back-propagate one micro-batch's loss with its exact weight.

        Args:
            loss: scalar tensor: the mean over ``count`` items (``reduction="mean"``)
                or their sum (``reduction="sum"``).
            count: number of items (examples, or non-ignored target tokens), an int
                or a 0-dim tensor (a tensor is read once, one device sync: pass an
                int when you have one). 0 is legal: the micro-batch contributes
                nothing, even if its mean loss is 0/0. ``None``: every micro-batch
                of the window weighs the same (the mean of the micro-batch means,
                or with ``reduction="sum"`` the mean of the micro-batch sums).
            reduction: ``"mean"`` or ``"sum"``.

        Raises:
            GradguardError: non-scalar loss, loss without grad, negative or
                non-finite count, NaN/Inf loss (``nonfinite="raise"``), a second
                backward for the same micro-batch, or mixing counted and
                uncounted micro-batches in one window. Nothing is changed then.

        >>> import torch, gradguard as gg
        >>> w = torch.ones(2, requires_grad=True)
        >>> acc = gg.Accumulator(torch.optim.SGD([w], lr=1.0), steps=2)
        >>> acc.backward((w * torch.tensor([1.0, 3.0])).sum(), count=1, reduction="sum")
        >>> acc.step(), w.grad is not None
        (False, True)
        """
        # Validate everything before touching any state or .grad.
        if reduction not in _REDUCTIONS:
            raise GradguardError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        if not isinstance(loss, torch.Tensor):
            raise GradguardError(f"loss must be a scalar torch.Tensor, got {type(loss).__name__}")
        if loss.dim() != 0:
            raise GradguardError(
                f"loss must be a scalar (0-dim) tensor, got shape {tuple(loss.shape)}: "
                "reduce it first (loss.mean() with count=<items>, or loss.sum() with reduction='sum')"
            )
        if not loss.requires_grad:
            raise GradguardError(
                "loss does not require grad: it was computed under torch.no_grad(), detached, "
                "or from parameters with requires_grad=False, so backward() has nothing to do"
            )
        if self._has_backward:
            raise GradguardError(
                f"backward() was already called for micro-batch {self._micro} of this window: "
                "call acc.step() after each micro-batch's backward(), or add the micro-batch's losses and call backward() once"
            )
        n = _count_value(count)
        counted = count is not None
        if self._counted is not None and counted != self._counted:
            raise GradguardError(
                f"micro-batch {self._micro} passed count={count!r} but earlier micro-batches of this window "
                f"{'passed counts' if self._counted else 'passed count=None'}: pass a count for every micro-batch of a window, or for none"
            )

        if n == 0:
            # Nothing to add. Its mean loss may be 0/0, so it is never back-propagated;
            # under DDP/FSDP2 the rank back-propagates zeros instead: it must join the
            # gradient sync, and FSDP2 also expects a backward after every forward.
            if self._sync.needs_empty_backward:
                self._sync.empty_backward(loss, self._params())
            self._last_synced = not self._in_no_sync
            self._commit_backward(counted, 0, None, reduction)
            return

        detached = loss.detach()
        bad = None
        if self.nonfinite == "raise":
            if not bool(torch.isfinite(detached)):
                raise GradguardError(
                    f"loss is {detached.item()} at micro-batch {self._micro} of window {self.optimizer_steps}: "
                    "nothing was back-propagated; find the cause (learning rate, bad data, log of 0), "
                    "or construct the Accumulator with nonfinite='skip' to drop such windows"
                )
        else:
            bad = ~torch.isfinite(detached)

        ref = self._ref if self._ref is not None else self._reference(n if counted else 1, counted)
        weight = (n if reduction == "mean" else 1) / (ref * self.steps)
        scaled = loss * weight if weight != 1 else loss
        if self.scaler is not None:
            scaled = self.scaler.scale(scaled)
        with accumulator_backward(counted=counted):  # a running gradguard.watch: this loss is weighted (or not)
            self._sync.backward(scaled)

        # The backward pass succeeded: only now does the window take this micro-batch.
        self._ref = ref
        self._last_synced = not self._in_no_sync
        if bad is not None:
            self._bad = bad if self._bad is None else (self._bad | bad)
        self._commit_backward(counted, n, detached, reduction)

    def _reference(self, first_count: float, counted: bool) -> float:
        if self._ref_hint is not None and self._hint_counted == counted:
            # The last window's global mean count: the same on every rank (it comes
            # from the all-reduced total), and steady where first counts vary.
            return self._ref_hint
        # Ranks must scale identically before their gradients are averaged, and they
        # see different counts: the distributed first window uses 1 on every rank.
        return 1 if self._sync.world_size > 1 else first_count

    def _commit_backward(self, counted: bool, n: float, detached: Optional[torch.Tensor], reduction: str) -> None:
        self._counted = counted
        self._has_backward = True
        weight_items = n if counted else 1
        self._total += weight_items
        if detached is not None:
            w = weight_items if reduction == "mean" else 1
            if self._loss_sum is None:
                # Accumulate in at least float32 (a bf16 sum of many losses would round).
                self._loss_sum = detached.to(torch.promote_types(detached.dtype, torch.float32)) * w
            else:
                self._loss_sum = self._loss_sum.add(detached, alpha=w)  # one kernel, no host sync

    # ------------------------------------------------------------------ step
    def step(self) -> bool:
        """End the current micro-batch; at the window's end, apply the exact update.

        Returns:
            True when the optimizer stepped.

        Raises:
            GradguardError: when no ``backward()`` was made for this micro-batch
                (use ``acc.backward(loss, count=0)`` for an empty one).
        """
        if not self._has_backward:
            raise GradguardError(
                f"step() called without backward() for micro-batch {self._micro}: one backward() then one step() per micro-batch "
                "(for a micro-batch with no items, call acc.backward(loss, count=0))"
            )
        self._micro += 1
        self._has_backward = False
        if self._micro < self.steps:
            return False
        return self._end_window()

    def flush(self) -> bool:
        """Step a partial window (fewer than ``steps`` micro-batches) with its exact weights.

        Call it after the last micro-batch of an epoch or of training. A
        micro-batch that had ``backward()`` but no ``step()`` yet is included.

        Returns:
            True when the optimizer stepped; False when nothing was pending.
        """
        if self._has_backward:
            self._micro += 1
            self._has_backward = False
        if self._micro == 0:
            return False
        return self._end_window()

    def _end_window(self) -> bool:
        params = self._params()
        sync = self._sync
        sync.finish_window(params, self._last_synced)

        total, loss_sum, bad = self._total, self._loss_sum, self._bad
        if sync.world_size > 1:
            # One collective per window: the global item count, loss sum and non-finite
            # flag together. float64 on every rank: dtypes must match across ranks (a rank
            # with 0 items has no loss dtype), and float32 rounds token totals above 2**24.
            device = loss_sum.device if loss_sum is not None else _device_of(params)
            zero = torch.zeros((), device=device, dtype=torch.float64)
            both = torch.stack([zero + float(total),
                                loss_sum.double() if loss_sum is not None else zero,
                                bad.double() if bad is not None else zero])
            both = sync.reduce_sum(both)
            total, loss_sum, bad = float(both[0]), both[1], both[2] > 0  # every rank drops, or none

        if bad is not None and bool(bad):
            return self._drop_window()
        if total == 0:
            return self._drop_window()
        if self.max_grad_norm is not None and any(p.grad is not None and p.grad.is_sparse for p in params):
            raise GradguardError(
                "max_grad_norm is set but some gradients are sparse (nn.Embedding(sparse=True)): "
                "torch.nn.utils.clip_grad_norm_ cannot clip sparse gradients; use max_grad_norm=None "
                "or a dense embedding. The window is kept: call acc.flush() after fixing the set-up"
            )

        # A rank whose window had 0 items never set a reference; use the one it would have.
        ref = self._ref if self._ref is not None else self._reference(1, bool(self._counted))
        factor = ref * self.steps * (sync.world_size if sync.grads_averaged else 1) / total
        if factor != 1.0 and not self._normalised:
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, factor)
        # If the update below raises (an out-of-memory error in the optimizer, say), the
        # window stays pending and a retried step() or flush() does not scale it again.
        self._normalised = True
        window_loss = loss_sum / total if loss_sum is not None else None
        self._ref_hint = total / (self._micro * sync.world_size)
        self._hint_counted = bool(self._counted)

        stepped = self._apply_update(params)
        if stepped:
            if self.scheduler is not None:
                self.scheduler.step()
            self.optimizer_steps += 1
            self._last_loss = window_loss
        else:
            self.skipped_windows += 1
        with accumulator_clearing():  # the watch knows this clearing is the Accumulator's own
            self.optimizer.zero_grad(set_to_none=self.set_to_none)
        self._reset_window()
        return stepped

    def _apply_update(self, params: List[torch.Tensor]) -> bool:
        """Unscale, clip, step. Returns False when the GradScaler skipped the step."""
        scaler = self.scaler
        if scaler is not None and self.max_grad_norm is not None:
            scaler.unscale_(self.optimizer)  # clip the true gradient, not the scaled one
        if self.max_grad_norm is not None:
            self.grad_norm = self._sync.clip_grad_norm_(params, self.max_grad_norm)
        if scaler is None:
            self._sync.step(self.optimizer)
            return True
        # scaler.step() calls optimizer.step() only when the gradients are finite: a
        # post-hook (public API, removed right after) sees whether it did.
        stepped = []
        handle = self.optimizer.register_step_post_hook(lambda *_: stepped.append(True))
        try:
            self._sync.step(self.optimizer, scaler)
        finally:
            handle.remove()
        scaler.update()
        return bool(stepped)

    def _drop_window(self) -> bool:
        """End a window without stepping: clear its gradients (a NaN window's are poison)."""
        with accumulator_clearing():
            self.optimizer.zero_grad(set_to_none=self.set_to_none)
        self.skipped_windows += 1
        self._reset_window()
        return False

    # ----------------------------------------------------------- checkpoint
    def state_dict(self) -> dict:
        """Everything needed to resume, also in the middle of a window.

        Holds the window's bookkeeping and, mid-window, the in-flight gradients
        (one entry per optimizer parameter, in ``param_groups`` order, None where
        a parameter has no gradient). Only tensors and plain Python values, so
        ``torch.load(path, weights_only=True)`` reads it. Like
        ``Module.state_dict()``, tensors are references: ``torch.save`` it (or
        deep-copy it) before training on. Save the model, optimizer, scheduler
        and scaler state beside it as usual.
        """
        in_flight = self._micro > 0 or self._has_backward
        if in_flight:
            # FSDP2 with deferred reduction keeps in-flight gradients inside FSDP:
            # the sync object brings them into .grad (a collective: call on every rank).
            self._sync.settle(self._params())
        return {
            "format": _FORMAT,
            "steps": self.steps,
            "micro": self._micro,
            "has_backward": self._has_backward,
            "counted": self._counted,
            "ref": self._ref,
            "total": self._total,
            "loss_sum": self._loss_sum,
            "bad": self._bad,
            "optimizer_steps": self.optimizer_steps,
            "skipped_windows": self.skipped_windows,
            "last_loss": self._last_loss,
            "ref_hint": self._ref_hint,
            "hint_counted": self._hint_counted,
            "normalised": self._normalised,
            "grads": [p.grad.detach() if p.grad is not None else None for p in self._params()] if in_flight else [],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`; in-flight gradients go back into ``.grad``.

        Raises:
            GradguardError: the dict is not an accumulator state, was saved with a
                different ``steps``, or its gradients do not match the optimizer's
                parameters. Nothing is changed then.
        """
        sd = state_dict
        if not isinstance(sd, dict) or sd.get("format") != _FORMAT:
            raise GradguardError(
                f"not a gradguard Accumulator state (format {sd.get('format') if isinstance(sd, dict) else type(sd).__name__!r}, "
                f"expected {_FORMAT!r}): pass the dict returned by acc.state_dict()"
            )
        missing = sorted(_STATE_KEYS - set(sd))
        if missing:
            raise GradguardError(f"the Accumulator state is missing {', '.join(map(repr, missing))}: it was not made by acc.state_dict()")
        if sd["steps"] != self.steps:
            raise GradguardError(
                f"the state was saved with steps={sd['steps']} but this Accumulator has steps={self.steps}: "
                "resume with the same number of micro-batches per step"
            )
        params, grads = self._params(), sd["grads"]
        if grads and len(grads) != len(params):
            raise GradguardError(
                f"the state holds gradients for {len(grads)} parameters but the optimizer has {len(params)}: "
                "load it into an Accumulator over the same optimizer (same parameter groups, same order)"
            )
        for i, (p, g) in enumerate(zip(params, grads)):
            if g is not None and tuple(g.shape) != tuple(p.shape):
                raise GradguardError(
                    f"in-flight gradient {i} has shape {tuple(g.shape)} but parameter {i} has shape {tuple(p.shape)}: "
                    "the state belongs to a different model"
                )
        # Validated: now change things.
        with accumulator_clearing():  # replacing .grad wholesale is this object's own doing
            for i, p in enumerate(params):
                g = grads[i] if grads else None
                p.grad = None if g is None else g.detach().to(device=p.device, dtype=p.dtype, copy=True)
        self._reset_window()
        self._micro = sd["micro"]
        self._has_backward = sd["has_backward"]
        self._counted = sd["counted"]
        self._ref = sd["ref"]
        self._total = sd["total"]
        self._loss_sum = sd["loss_sum"]
        self._bad = sd["bad"]
        self.optimizer_steps = sd["optimizer_steps"]
        self.skipped_windows = sd["skipped_windows"]
        self._last_loss = sd["last_loss"]
        self._ref_hint = sd["ref_hint"]
        self._hint_counted = sd["hint_counted"]
        self._normalised = sd["normalised"]

    def __repr__(self) -> str:
        return (
            f"Accumulator(steps={self.steps}, micro_step={self._micro}, optimizer_steps={self.optimizer_steps}, "
            f"world_size={self._sync.world_size})"
        )


def _count_value(count: Count) -> float:
    """A validated, non-negative Python number for ``count`` (None -> 1)."""
    if count is None:
        return 1
    if isinstance(count, torch.Tensor):
        if count.dim() != 0:
            raise GradguardError(f"count must be an int or a 0-dim tensor, got a tensor of shape {tuple(count.shape)}")
        if count.dtype == torch.bool:
            raise GradguardError("count must be a number of items, got a bool tensor: use mask.sum()")
        value = count.item()  # the one sync a tensor count costs (0 must be seen to keep 0/0 out)
    elif isinstance(count, bool) or not isinstance(count, Real):
        raise GradguardError(f"count must be an int or a 0-dim tensor (number of items), got {count!r}")
    else:
        value = count
    if not math.isfinite(value) or value < 0:
        raise GradguardError(f"count must be a finite number >= 0 (items in this micro-batch), got {value!r}")
    return value


def _device_of(params: List[torch.Tensor]) -> torch.device:
    return params[0].device if params else torch.device("cpu")
