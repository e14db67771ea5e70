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
the in-flight sum; the result is exact whatever it is. On one process, a count
far above ``ref`` (say 1 then 500,000) first rescales the in-flight gradients
and raises ``ref`` to it, so that no weight overflows a half-precision loss.

Host reads (each stalls the CPU until a GPU catches up): with int counts (or
None) a window reads the device once, at its end: the loss sum (finite? the
window's mean loss) together with anything else the window needs, in one
transfer. A non-finite loss is found there; under ``nonfinite="raise"`` the
window is then discarded before anything is applied and the error names the
micro-batch. ``nonfinite="raise_early"`` checks each loss in ``backward()``
instead (one read per micro-batch, before ``.grad`` is touched). A count
given as a tensor is read in ``backward()`` only with ``reduction="mean"``,
where a 0-item micro-batch's 0/0 must be kept out of ``.grad``; with
``reduction="sum"`` it stays on the device until the window's read.
"""

from __future__ import annotations

import inspect
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from numbers import Real
from typing import Iterator, List, Optional, Tuple, Union

import torch

from ._errors import GradguardError
from .distributed import sync_for
from .deepspeed import is_deepspeed_engine
from ._channel import accumulator_backward, accumulator_clearing


_FORMAT = "gradguard.Accumulator/1"
_FORMAT_PREFIX = "gradguard.Accumulator/"
_STATE_KEYS = frozenset({
    "format", "steps", "micro", "has_backward", "counted", "ref", "total", "loss_sum", "bad",
    "optimizer_steps", "skipped_windows", "last_loss", "ref_hint", "hint_counted", "normalised", "grads",
})
_NONFINITE_MODES = ("raise", "skip", "raise_early")
_REDUCTIONS = ("mean", "sum")
# A count more than this many times the scale reference rescales the in-flight sum first
# (one process only: ranks must scale alike), so a weight stays below it / steps.
_REBASE_RATIO = 64

Count = Union[int, float, torch.Tensor, None]


@dataclass
class _Window:
    """The in-flight window: everything a window's end resets, in one record."""

    micro: int = 0  # micro-batches ended (step() called)
    has_backward: bool = False  # backward() done for the current micro-batch
    counted: Optional[bool] = None  # whether this window's micro-batches pass counts
    ref: Optional[float] = None  # the scale reference (see the module docstring)
    total: float = 0  # items whose count is a Python number
    # (micro-batch, count tensor) of reduction="sum" micro-batches: read at the window's end.
    pending_counts: List[Tuple[int, torch.Tensor]] = field(default_factory=list)
    loss_sum: Optional[torch.Tensor] = None  # sum of per-item losses (device, no read)
    # (micro-batch, detached loss): read only to name a non-finite one.
    losses: List[Tuple[int, torch.Tensor]] = field(default_factory=list)
    bad: Optional[torch.Tensor] = None  # non-finite flag carried over by a loaded state
    contributed: bool = False  # a backward of this window reached .grad
    # The optimizer parameters' .grad (with versions) before the window's first contribution:
    # [] when all were None; None until recorded. Tells a failed first pass how to undo
    # itself, and the window's end whether its losses reached the optimizer at all.
    start_grads: Optional[list] = None
    normalised: bool = False  # the end-of-window factor is in .grad (a retried step must not apply it twice)
    in_no_sync: bool = False  # inside microbatch() that defers gradient sync
    last_synced: bool = True  # did the last backward run with gradient sync?

    @property
    def in_flight(self) -> bool:
        return self.micro > 0 or self.has_backward


class Accumulator:
    """Exact gradient accumulation over ``steps`` micro-batches per optimizer step.

    Each micro-batch: ``acc.backward(loss, count=n)`` then ``acc.step()``. When
    ``steps`` micro-batches are in, the accumulated gradient is normalised to the
    exact full-window mean, then (unscale, clip) optimizer step, scheduler step,
    and the gradients are cleared. ``acc.flush()`` steps a final partial window
    with its true weights.

    Args:
        optimizer: the ``torch.optim.Optimizer`` whose parameters accumulate, or a
            ``deepspeed.DeepSpeedEngine`` (ZeRO stages 0-3): backward and step then go
            through the engine, one ``engine.step()`` per window (see :mod:`gradguard.deepspeed`).
        steps: micro-batches per optimizer step (>= 1).
        model: the model; a ``DistributedDataParallel`` or FSDP2 (``fully_shard``)
            model makes ``acc.microbatch()`` defer gradient sync to the window's end.
        scheduler: an LR scheduler of ``optimizer``, stepped once per optimizer step that happened.
        scaler: a ``torch.amp.GradScaler``; losses are scaled, gradients unscaled
            before clipping, and a step the scaler skips does not step the scheduler.
        max_grad_norm: clip the total gradient norm to this value before stepping.
        set_to_none: how gradients are cleared after a step (``zero_grad(set_to_none=...)``).
        nonfinite: ``"raise"`` (default): a NaN/Inf loss is found at the window's
            end (no host read per micro-batch) and :class:`GradguardError` names
            it; nothing is applied and the window's gradients are discarded.
            ``"raise_early"``: raise in ``backward()``, before the loss touches
            ``.grad`` (one host read per micro-batch: for debugging). ``"skip"``:
            drop the window that contained it and go on.
        accelerator: an ``accelerate.Accelerator`` or a ``lightning.fabric.Fabric``
            that prepared ``optimizer`` (and ``model``): its backward, no_sync and
            clipping are used, and its optimizer steps once per window (see
            :mod:`gradguard.accelerators`).

    Raises:
        GradguardError: for ``steps`` < 1, a non-optimizer or one whose step
            needs a closure (LBFGS), a scheduler of another optimizer, a
            ``scaler`` that is not a GradScaler, or a bad ``max_grad_norm``.

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
        accelerator=None,
    ) -> None:
        engine_sync = None
        if is_deepspeed_engine(optimizer):
            # The engine stands in for the optimizer: its driver shows the Accumulator the
            # model's parameters and steps through engine.step() (see gradguard.deepspeed).
            from .deepspeed import DeepSpeedSync

            engine_sync = DeepSpeedSync(optimizer)
            optimizer = engine_sync.optimizer
        if not (hasattr(optimizer, "param_groups") and callable(getattr(optimizer, "step", None))):
            raise GradguardError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}: "
                "pass the optimizer whose parameters accumulate, e.g. Accumulator(torch.optim.AdamW(model.parameters()), steps=4)"
            )
        if _needs_closure(optimizer):
            raise GradguardError(
                f"{type(optimizer).__name__}.step() needs a closure that re-evaluates the loss (several forward and "
                "backward passes per step), which an accumulation window cannot give it: use this optimizer without "
                "the Accumulator, with a closure over the whole batch"
            )
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise GradguardError(f"steps must be an int >= 1 (micro-batches per optimizer step), got {steps!r}")
        if max_grad_norm is not None and (
            isinstance(max_grad_norm, bool) or not isinstance(max_grad_norm, Real) or not max_grad_norm > 0 or math.isinf(max_grad_norm)
        ):
            raise GradguardError(f"max_grad_norm must be a positive finite number or None, got {max_grad_norm!r}")
        if engine_sync is not None:
            engine_sync.check_options(steps, scheduler=scheduler, scaler=scaler, max_grad_norm=max_grad_norm, accelerator=accelerator)
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            raise GradguardError(
                "scheduler is a ReduceLROnPlateau, which steps on a metric (usually a validation loss, once per epoch): "
                "do not pass it to the Accumulator; call scheduler.step(val_loss) yourself"
            )
        if scheduler is not None and not callable(getattr(scheduler, "step", None)):
            raise GradguardError(f"scheduler must have a step() method (an LR scheduler), got {type(scheduler).__name__}")
        bound = getattr(scheduler, "optimizer", None)
        if bound is not None and bound is not optimizer and bound is not getattr(optimizer, "optimizer", None):
            raise GradguardError(
                f"the scheduler belongs to another optimizer ({type(bound).__name__} at {id(bound):#x}), not the "
                "Accumulator's: its step() would change a learning rate this Accumulator never uses; build the "
                "scheduler on the optimizer you pass here"
            )
        if scaler is not None and not all(callable(getattr(scaler, m, None)) for m in ("scale", "unscale_", "step", "update")):
            raise GradguardError(
                f"scaler must be a torch.amp.GradScaler or None, got {scaler!r}: "
                "pass scaler=torch.amp.GradScaler('cuda') (or leave it out without mixed precision)"
            )
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
        if engine_sync is not None:
            self._sync = engine_sync
        elif accelerator is not None:
            from .accelerators import accelerator_sync  # the frameworks stay optional

            self._sync = accelerator_sync(accelerator, optimizer, model=model, scaler=scaler)
        else:
            self._sync = sync_for(model)

        #: optimizer steps taken (windows that stepped).
        self.optimizer_steps = 0
        #: windows dropped: a non-finite loss (under ``"skip"``, and discarded
        #: under ``"raise"``), a window with 0 items in total, a step skipped by
        #: the GradScaler, or a backward that failed halfway through a window.
        self.skipped_windows = 0
        #: total gradient norm before clipping of the last window (a tensor), when ``max_grad_norm`` is set.
        self.grad_norm: Optional[torch.Tensor] = None
        self._last_loss: Union[torch.Tensor, float, None] = None
        # Mean count per micro-batch of the last window, and whether it was counted:
        # the next window's scale reference (see the module docstring).
        self._ref_hint: Optional[float] = None
        self._hint_counted: Optional[bool] = None
        self._w = _Window()

    # ------------------------------------------------------------------ window
    def _ends_window(self, micro: int) -> bool:
        """Whether micro-batch ``micro`` (from 0) is its window's last: the one place the boundary is decided."""
        return micro + 1 >= self.steps

    @property
    def micro_step(self) -> int:
        """Micro-batches already ended in the current window (0 .. steps-1)."""
        return self._w.micro

    @property
    def loss(self) -> Optional[float]:
        """The exact mean loss (weighted by counts) of the last window that stepped; None before."""
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
        w = self._w
        ends = self._ends_window(w.micro)
        w.in_no_sync = not ends and self._sync.defers_sync
        try:
            with self._sync.microbatch(ends):
                yield
        finally:
            w.in_no_sync = False

    def backward(self, loss: torch.Tensor, *, count: Count = None, reduction: str = "mean") -> None:
        """Back-propagate one micro-batch's loss with its exact weight.

        Args:
            loss: scalar tensor: the mean over ``count`` items (``reduction="mean"``)
                or their sum (``reduction="sum"``).
            count: number of items (examples, or non-ignored target tokens), an int
                or a 0-dim tensor. 0 is legal: the micro-batch contributes nothing,
                even if its mean loss is 0/0. A tensor count with ``reduction="mean"``
                is read here (one host read: pass an int when you have one, e.g.
                counted before the labels move to the GPU); with ``reduction="sum"``
                it is read with the window's end. ``None``: every micro-batch
                of the window weighs the same (the mean of the micro-batch means,
                or with ``reduction="sum"`` the mean of the micro-batch sums).
            reduction: ``"mean"`` or ``"sum"``.

        Raises:
            GradguardError: non-scalar loss, loss without grad, negative or
                non-finite count, NaN/Inf loss (``nonfinite="raise_early"``), a second
                backward for the same micro-batch, or mixing counted and
                uncounted micro-batches in one window: nothing is changed then.
                A backward pass that fails halfway (out of memory) after earlier
                micro-batches of the window reached ``.grad``: the window is
                discarded (its gradients cannot be told apart) and the error says so.

        >>> import torch, gradguard as gg
        >>> w = torch.ones(2, requires_grad=True)
        >>> acc = gg.Accumulator(torch.optim.SGD([w], lr=1.0), steps=2)
        >>> acc.backward((w * torch.tensor([1.0, 3.0])).sum(), count=1, reduction="sum")
        >>> acc.step(), w.grad is not None
        (False, True)
        """
        # Validate everything before touching any state or .grad.
        w = self._w
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
        if w.has_backward:
            raise GradguardError(
                f"backward() was already called for micro-batch {w.micro} of this window: "
                "call acc.step() after each micro-batch's backward(), or add the micro-batch's losses and call backward() once"
            )
        n, pending = _count_value(count, reduction)
        counted = count is not None
        if w.counted is not None and counted != w.counted:
            raise GradguardError(
                f"micro-batch {w.micro} passed count={count!r} but earlier micro-batches of this window "
                f"{'passed counts' if w.counted else 'passed count=None'}: pass a count for every micro-batch of a window, or for none"
            )

        if n == 0 and pending is None:
            # Nothing to add. Its mean loss may be 0/0, so it is never back-propagated;
            # under DDP/FSDP2 the rank back-propagates zeros instead: it must join the
            # gradient sync, and FSDP2 also expects a backward after every forward.
            # (A failure halfway leaves only zeros behind: nothing to undo.)
            if self._sync.needs_empty_backward:
                self._sync.empty_backward(loss, self._params())
            w.last_synced = not w.in_no_sync
            self._commit_backward(counted, 0, None, None, reduction)
            return

        detached = loss.detach()
        if self.nonfinite == "raise_early" and not bool(torch.isfinite(detached)):
            raise GradguardError(
                f"loss is {detached.item()} at micro-batch {w.micro} of window {self.optimizer_steps}: "
                "nothing was back-propagated; find the cause (learning rate, bad data, log of 0), "
                "or construct the Accumulator with nonfinite='skip' to drop such windows"
            )

        items = n if counted else 1  # a pending tensor count is 0 here: it is not known yet
        ref = w.ref if w.ref is not None else self._reference(items if pending is None else 1, counted)
        rebase = (pending is None and items > _REBASE_RATIO * ref and self._sync.world_size == 1
                  and self._sync.grads_in_params)
        if rebase:
            ref = items  # rescales the in-flight sum below, once this micro-batch is sure to run
        weight = (items if reduction == "mean" else 1) / (ref * self.steps)
        with torch.enable_grad():  # acc.backward() inside torch.no_grad() works, as loss.backward() does
            scaled = loss * weight if weight != 1 else loss
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
        if not w.contributed:
            w.start_grads = _grad_marks(self._params())
        elif rebase:
            grads = [p.grad for p in self._params() if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, w.ref / ref)
        try:
            with accumulator_backward(counted=counted):  # a running gradguard.watch: this loss is weighted (or not)
                self._sync.backward(scaled)
        except BaseException as exc:
            if self._undo_failed_backward() or not isinstance(exc, Exception):
                raise
            raise GradguardError(
                f"backward() of micro-batch {w.micro} failed halfway ({type(exc).__name__}: {exc}) after earlier "
                "micro-batches of this window had reached .grad; what the failed pass added cannot be told apart "
                "from them, so the window was discarded (nothing applied, its gradients cleared, "
                "skipped_windows + 1). Training can go on: the next backward() starts a new window"
            ) from exc

        # The backward pass succeeded: only now does the window take this micro-batch.
        w.ref = ref
        w.contributed = True
        w.last_synced = not w.in_no_sync
        self._commit_backward(counted, items, pending, detached, reduction)

    def _reference(self, first_count: float, counted: bool) -> float:
        if self._ref_hint is not None and self._hint_counted == counted:
            # The last window's global mean count: the same on every rank (it comes
            # from the all-reduced total), and steady where first counts vary.
            return self._ref_hint
        # Ranks must scale identically before their gradients are averaged, and they
        # see different counts: the distributed first window uses 1 on every rank.
        return 1 if self._sync.world_size > 1 else first_count

    def _commit_backward(self, counted: bool, items: float, pending: Optional[torch.Tensor],
                         detached: Optional[torch.Tensor], reduction: str) -> None:
        w = self._w
        w.counted = counted
        w.has_backward = True
        w.total += items
        if pending is not None:
            w.pending_counts.append((w.micro, pending))
        if detached is not None:
            w.losses.append((w.micro, detached))
            alpha = float(items) if reduction == "mean" else 1.0
            if w.loss_sum is None:
                # Accumulate in at least float32 (a bf16 sum of many losses would round).
                w.loss_sum = detached.to(torch.promote_types(detached.dtype, torch.float32)) * alpha
            else:
                w.loss_sum = w.loss_sum.add(detached, alpha=alpha)  # one kernel, no host read

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

    # ------------------------------------------------------------------ step
    def step(self) -> bool:
        """End the current micro-batch; at the window's end, apply the exact update.

        Returns:
            True when the optimizer stepped.

        Raises:
            GradguardError: when no ``backward()`` was made for this micro-batch
                (use ``acc.backward(loss, count=0)`` for an empty one); at the
                window's end, for a NaN/Inf loss (``nonfinite="raise"``), an invalid
                tensor count, or losses that reached none of the optimizer's
                parameters: the window is discarded then, nothing applied.
        """
        w = self._w
        if not w.has_backward:
            raise GradguardError(
                f"step() called without backward() for micro-batch {w.micro}: one backward() then one step() per micro-batch "
                "(for a micro-batch with no items, call acc.backward(loss, count=0))"
            )
        ends = self._ends_window(w.micro)
        w.micro += 1
        w.has_backward = False
        return self._end_window() if ends else False

    def flush(self) -> bool:
        """Step a partial window (fewer than ``steps`` micro-batches) with its exact weights.

        Call it after the last micro-batch of an epoch or of training. A
        micro-batch that had ``backward()`` but no ``step()`` yet is included.

        Returns:
            True when the optimizer stepped; False when nothing was pending.
        """
        w = self._w
        if w.has_backward:
            w.micro += 1
            w.has_backward = False
        if w.micro == 0:
            return False
        return self._end_window()

    def _end_window(self) -> bool:
        w, sync = self._w, self._sync
        params = self._params()
        sync.finish_window(params, w.last_synced)
        w.last_synced = True  # a retried end (after a failed optimizer step) must not reduce again

        total, loss_sum, bad, bad_count = self._read_window(params)
        if bad_count:
            message = self._bad_count_message()
            self._drop_window()
            raise GradguardError(message)
        if bad or (loss_sum is not None and not math.isfinite(loss_sum)):
            if self.nonfinite == "skip":
                return self._drop_window()
            found = self._nonfinite_loss()
            if bad or found is not None or sync.world_size > 1:
                message = self._nonfinite_message(found)
                self._drop_window()
                raise GradguardError(message)
            # Every loss of the window is finite: only their weighted sum overflowed; the gradient is fine.
        if total == 0:
            return self._drop_window()
        if sync.world_size == 1 and sync.grads_in_params and not _reached(params, w.start_grads):
            self._drop_window()
            raise GradguardError(
                "the window's losses reach none of the optimizer's parameters (no .grad of theirs changed): the loss "
                "comes from another model or from detached outputs, and stepping would move nothing. Pass the "
                "optimizer of the model the loss is computed from. The window was discarded"
            )
        if self.max_grad_norm is not None and any(p.grad is not None and p.grad.is_sparse for p in params):
            raise GradguardError(
                "max_grad_norm is set but some gradients are sparse (nn.Embedding(sparse=True)): "
                "torch.nn.utils.clip_grad_norm_ cannot clip sparse gradients; use max_grad_norm=None "
                "or a dense embedding. The window is kept: call acc.flush() after fixing the set-up"
            )

        # A rank whose window had 0 items never set a reference; use the one it would have.
        ref = w.ref if w.ref is not None else self._reference(1, bool(w.counted))
        factor = ref * self.steps * (sync.world_size if sync.grads_averaged else 1) / total
        if factor != 1.0 and not w.normalised:
            sync.scale_grads(params, factor)  # .grad, or where the framework keeps the reduced gradient
        # If the update below raises (an out-of-memory error in the optimizer, say), the
        # window stays pending and a retried step() or flush() does not scale it again.
        w.normalised = True
        self._ref_hint = total / (w.micro * sync.world_size)
        self._hint_counted = bool(w.counted)

        stepped = self._apply_update(params)
        # The optimizer has stepped (or the scaler skipped it): the window is over,
        # whatever fails after this (a scheduler past its last step, say).
        if stepped:
            self.optimizer_steps += 1
            self._last_loss = loss_sum / total if loss_sum is not None else None
        else:
            self.skipped_windows += 1
        self._clear_window()
        if stepped and self.scheduler is not None:
            self.scheduler.step()
        return stepped

    def _read_window(self, params: List[torch.Tensor]) -> Tuple[float, Optional[float], bool, bool]:
        """The window's item total, loss sum, non-finite flag and invalid-count flag: one host read.

        On one process with Python counts and no loss (every micro-batch empty)
        nothing is read. Distributed: summed over ranks first (one collective),
        in float64 on every rank: dtypes must match across ranks (a rank with
        0 items has no loss dtype), and float32 rounds token totals above 2**24.
        """
        w, sync = self._w, self._sync
        distributed = sync.world_size > 1
        if not distributed and w.loss_sum is None and not w.pending_counts and w.bad is None:
            return w.total, None, False, False
        device = (w.loss_sum.device if w.loss_sum is not None
                  else w.pending_counts[0][1].device if w.pending_counts else _device_of(params))
        zero = torch.zeros((), device=device, dtype=torch.float64)
        total, bad_count = zero + float(w.total), zero
        if w.pending_counts:
            counts = torch.stack([_on(c.double(), device) for _, c in w.pending_counts])
            total = total + counts.sum()
            bad_count = (~torch.isfinite(counts) | (counts < 0)).any().double()
        vec = torch.stack([total,
                           w.loss_sum.double() if w.loss_sum is not None else zero,
                           w.bad.double() if w.bad is not None else zero,
                           bad_count])
        if distributed:
            vec = sync.reduce_sum(vec)  # every rank decides alike: all step, drop or raise
        t, s, b, c = vec.to("cpu", copy=True).tolist()  # the window's one host read (a single transfer)
        exact_total = w.total if not distributed and not w.pending_counts else t
        return exact_total, (s if w.loss_sum is not None or distributed else None), b > 0, c > 0

    def _nonfinite_loss(self) -> Optional[Tuple[int, float]]:
        """(micro-batch, value) of this rank's first non-finite loss in the window (a read, on the error path only)."""
        w = self._w
        if not w.losses:
            return None
        values = torch.stack([l.double() for _, l in w.losses]).tolist()
        for (i, _), v in zip(w.losses, values):
            if not math.isfinite(v):
                return i, v
        return None

    def _nonfinite_message(self, found: Optional[Tuple[int, float]]) -> str:
        where = (f"loss is {found[1]} at micro-batch {found[0]} of window {self.optimizer_steps} (micro-batches count from 0)"
                 if found is not None else
                 f"a non-finite loss in window {self.optimizer_steps} "
                 + ("on another rank" if self._sync.world_size > 1 else "(in a micro-batch before the state was loaded)"))
        return (f"{where}: nothing was applied (optimizer, scheduler, scaler and parameters untouched) and the window's "
                "gradients were discarded, so training can go on or stop cleanly. Find the cause (learning rate, bad "
                "data, log of 0); nonfinite='skip' drops such windows silently, nonfinite='raise_early' raises in "
                "backward() before the loss reaches .grad")

    def _bad_count_message(self) -> str:
        w = self._w
        values = torch.stack([c.double() for _, c in w.pending_counts]).tolist() if w.pending_counts else []
        for (i, _), v in zip(w.pending_counts, values):
            if not math.isfinite(v) or v < 0:
                return (f"count must be a finite number >= 0 (items in the micro-batch), got {v!r} at micro-batch {i} "
                        f"of window {self.optimizer_steps}: nothing was applied and the window's gradients were discarded")
        return (f"a count of window {self.optimizer_steps} on another rank is negative or not finite: nothing was "
                "applied and the window's gradients were discarded")

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

    def _clear_window(self) -> None:
        with accumulator_clearing():  # the watch knows this clearing is the Accumulator's own
            self.optimizer.zero_grad(set_to_none=self.set_to_none)
        self._w = _Window()

    def _drop_window(self) -> bool:
        """End a window without stepping: clear its gradients (a NaN window's are poison)."""
        self._clear_window()
        self.skipped_windows += 1
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
        w = self._w
        if w.in_flight:
            # FSDP2 with deferred reduction keeps in-flight gradients inside FSDP:
            # the sync object brings them into .grad (a collective: call on every rank).
            self._sync.settle(self._params())
        total, bad = w.total, w.bad
        if w.pending_counts:  # counts still on the device: read them now (a checkpoint is no hot path)
            values = torch.stack([c.double() for _, c in w.pending_counts]).tolist()
            if all(math.isfinite(v) and v >= 0 for v in values):
                total = total + sum(values)
            else:
                bad = torch.ones((), dtype=torch.bool)  # the resumed window ends dropped, as this one would
        return {
            "format": _FORMAT,
            "steps": self.steps,
            "micro": w.micro,
            "has_backward": w.has_backward,
            "counted": w.counted,
            "ref": w.ref,
            "total": total,
            "loss_sum": w.loss_sum,
            "bad": bad,
            "optimizer_steps": self.optimizer_steps,
            "skipped_windows": self.skipped_windows,
            "last_loss": self._last_loss,
            "ref_hint": self._ref_hint,
            "hint_counted": self._hint_counted,
            "normalised": w.normalised,
            "grads": [p.grad.detach() if p.grad is not None else None for p in self._params()] if w.in_flight else [],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`; in-flight gradients go back into ``.grad``.

        Every field is checked against this Accumulator (its ``steps``, its
        optimizer's parameters) before anything changes: loading is all or nothing.

        Raises:
            GradguardError: the dict is not an accumulator state (or one of a newer
                format), was saved with a different ``steps``, has a field of the
                wrong type or out of range, or its gradients do not match the
                optimizer's parameters. Nothing is changed then.
        """
        params = self._params()
        window, counters, grads = _check_state(state_dict, self.steps, params)
        # Convert every gradient first: a failure here must leave .grad as it was.
        try:
            new_grads = [None if g is None else g.detach().to(device=p.device, dtype=p.dtype, copy=True)
                         for p, g in zip(params, grads or [None] * len(params))]
        except (RuntimeError, TypeError) as exc:
            raise GradguardError(f"an in-flight gradient of the state cannot be moved to its parameter ({exc}): nothing was loaded") from exc
        window.contributed = any(g is not None for g in new_grads)
        window.start_grads = [] if window.contributed else None
        with accumulator_clearing():  # replacing .grad wholesale is this object's own doing
            for p, g in zip(params, new_grads):
                p.grad = g
        self._w = window
        self.optimizer_steps, self.skipped_windows, self._last_loss, self._ref_hint, self._hint_counted = counters

    def __repr__(self) -> str:
        return (
            f"Accumulator(steps={self.steps}, micro_step={self._w.micro}, optimizer_steps={self.optimizer_steps}, "
            f"world_size={self._sync.world_size})"
        )


def _needs_closure(optimizer) -> bool:
    """True when ``optimizer.step`` requires a closure argument (LBFGS)."""
    try:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return closure is not None and closure.default is inspect.Parameter.empty


def _count_value(count: Count, reduction: str) -> Tuple[float, Optional[torch.Tensor]]:
    """A validated non-negative Python count (None -> 1), or (0, tensor) for a count left on the device.

    A tensor count of a summed loss stays on the device (the sum of 0 items is 0,
    no 0/0 can reach .grad); it is checked at the window's end.
    """
    if count is None:
        return 1, None
    if isinstance(count, torch.Tensor):
        if count.dim() != 0:
            raise GradguardError(f"count must be an int or a 0-dim tensor, got a tensor of shape {tuple(count.shape)}")
        if count.dtype == torch.bool or count.is_complex():
            raise GradguardError(f"count must be a number of items, got a {count.dtype} tensor: use mask.sum()")
        if reduction == "sum":
            return 0, count.detach()
        value = count.item()  # the one read a tensor count of a mean costs (0 must be seen to keep 0/0 out)
    elif isinstance(count, bool) or not isinstance(count, Real):
        raise GradguardError(f"count must be an int or a 0-dim tensor (number of items), got {count!r}")
    else:
        value = count
    try:
        ok = math.isfinite(value) and value >= 0
    except OverflowError:  # an int beyond float range
        ok = False
    if not ok:
        raise GradguardError(f"count must be a finite number >= 0 (items in this micro-batch), got {value!r}")
    return value, None


def _grad_marks(params: List[torch.Tensor]) -> list:
    """Each parameter's .grad and its version counter ([] when every .grad is None)."""
    grads = [p.grad for p in params]
    if all(g is None for g in grads):
        return []
    return [None if g is None else (g, g._version) for g in grads]


def _changed(p: torch.Tensor, mark) -> bool:
    if mark is None:
        return p.grad is not None
    g, version = mark
    return p.grad is not g or g._version != version


def _reached(params: List[torch.Tensor], marks: Optional[list]) -> bool:
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


def _on(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t if t.device == device else t.to(device)


def _device_of(params: List[torch.Tensor]) -> torch.device:
    return params[0].device if params else torch.device("cpu")


# ------------------------------------------------------------ state checks
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def _check_state(sd, steps: int, params: List[torch.Tensor]):
    """Validate a saved state against ``steps`` and ``params``; returns (window, counters, grads).

    Raises GradguardError naming the first field that cannot be right.
    """
    if not isinstance(sd, dict) or sd.get("format") != _FORMAT:
        fmt = sd.get("format") if isinstance(sd, dict) else None
        if isinstance(fmt, str) and fmt.startswith(_FORMAT_PREFIX):
            raise GradguardError(
                f"the Accumulator state has format {fmt!r}, which this gradguard does not read (it reads {_FORMAT!r}): "
                "it was saved by another gradguard version; load it with the version that saved it, or upgrade gradguard"
            )
        raise GradguardError(
            f"not a gradguard Accumulator state (format {fmt if isinstance(sd, dict) else type(sd).__name__!r}, "
            f"expected {_FORMAT!r}): pass the dict returned by acc.state_dict()"
        )
    missing = sorted(_STATE_KEYS - set(sd))
    if missing:
        raise GradguardError(f"the Accumulator state is missing {', '.join(map(repr, missing))}: it was not made by acc.state_dict()")
    extra = sorted(set(sd) - _STATE_KEYS, key=repr)
    if extra:
        raise GradguardError(f"the Accumulator state has unknown keys {', '.join(map(repr, extra))}: it was not made by acc.state_dict()")

    def bad(key, want):
        return GradguardError(f"the Accumulator state's {key} is {sd[key]!r}, but it must be {want}: the state is damaged or was not made by acc.state_dict()")

    if not _is_int(sd["steps"]):
        raise bad("steps", "an int")
    if sd["steps"] != steps:
        raise GradguardError(
            f"the state was saved with steps={sd['steps']} but this Accumulator has steps={steps}: "
            "resume with the same number of micro-batches per step"
        )
    micro, has_backward = sd["micro"], sd["has_backward"]
    if not isinstance(has_backward, bool):
        raise bad("has_backward", "True or False")
    if not _is_int(micro) or not 0 <= micro <= steps or (micro == steps and has_backward):
        raise bad("micro", f"an int from 0 to {steps - 1} (steps - 1)")
    in_flight = micro > 0 or has_backward
    counted = sd["counted"]
    if counted not in (None, True, False) or (counted is None) == in_flight:
        raise bad("counted", "True or False in a window with micro-batches, None otherwise")
    ref = sd["ref"]
    if ref is not None and not (_is_number(ref) and math.isfinite(ref) and ref > 0):
        raise bad("ref", "None or a finite number > 0")
    total = sd["total"]
    if not (_is_number(total) and math.isfinite(total) and total >= 0):
        raise bad("total", "a finite number >= 0")
    if counted is False and total != micro + has_backward:
        raise bad("total", f"{micro + has_backward} (one per uncounted micro-batch)")
    if not in_flight and total != 0:
        raise bad("total", "0 outside a window")
    for key, dtype_ok in (("loss_sum", lambda t: t.is_floating_point()), ("bad", lambda t: t.dtype == torch.bool)):
        v = sd[key]
        if v is not None and not (isinstance(v, torch.Tensor) and v.dim() == 0 and dtype_ok(v)):
            raise bad(key, "None or a 0-dim " + ("floating" if key == "loss_sum" else "bool") + " tensor")
    if not in_flight and (sd["loss_sum"] is not None or sd["bad"] is not None):
        raise bad("loss_sum", "None outside a window")
    for key in ("optimizer_steps", "skipped_windows"):
        if not (_is_int(sd[key]) and sd[key] >= 0):
            raise bad(key, "an int >= 0")
    last = sd["last_loss"]
    if last is not None and not ((_is_number(last)) or (isinstance(last, torch.Tensor) and last.dim() == 0 and last.is_floating_point())):
        raise bad("last_loss", "None, a number or a 0-dim floating tensor")
    hint, hint_counted = sd["ref_hint"], sd["hint_counted"]
    if hint is not None and not (_is_number(hint) and math.isfinite(hint) and hint > 0):
        raise bad("ref_hint", "None or a finite number > 0")
    if hint_counted not in (None, True, False) or (hint is None) != (hint_counted is None):
        raise bad("hint_counted", "True or False with a ref_hint, None without")
    normalised = sd["normalised"]
    if not isinstance(normalised, bool) or (normalised and (micro == 0 or has_backward)):
        raise bad("normalised", "True only for an ended window whose step failed")

    grads = sd["grads"]
    if not isinstance(grads, (list, tuple)):
        raise bad("grads", "a list")
    if in_flight and len(grads) != len(params) or not in_flight and grads:
        raise GradguardError(
            f"the state holds gradients for {len(grads)} parameters but "
            + (f"the optimizer has {len(params)}: load it into an Accumulator over the same optimizer (same parameter groups, same order)"
               if in_flight else "no window was in flight: it was not made by acc.state_dict()")
        )
    # A window whose losses include a non-finite one legitimately holds NaN gradients (it ends dropped).
    poisoned = (sd["bad"] is not None and bool(sd["bad"])) or (sd["loss_sum"] is not None and not bool(torch.isfinite(sd["loss_sum"])))
    for i, (p, g) in enumerate(zip(params, grads)):
        if g is None:
            continue
        if not isinstance(g, torch.Tensor):
            raise GradguardError(f"in-flight gradient {i} is a {type(g).__name__}, not a tensor: the state is damaged")
        if tuple(g.shape) != tuple(p.shape):
            raise GradguardError(
                f"in-flight gradient {i} has shape {tuple(g.shape)} but parameter {i} has shape {tuple(p.shape)}: "
                "the state belongs to a different model"
            )
        if g.is_complex() != p.is_complex() or not (g.is_floating_point() or g.is_complex()):
            raise GradguardError(f"in-flight gradient {i} has dtype {g.dtype} but parameter {i} has {p.dtype}: the state belongs to a different model")
        if g.is_meta:
            raise GradguardError(f"in-flight gradient {i} is a meta tensor (no values): the state is damaged")
        values = g.coalesce().values() if g.is_sparse else g
        if not poisoned and not bool(torch.isfinite(values).all()):
            raise GradguardError(f"in-flight gradient {i} holds NaN or Inf although the window's losses are finite: the state is damaged")

    window = _Window(micro=micro, has_backward=has_backward, counted=counted, ref=ref, total=total,
                     loss_sum=sd["loss_sum"], bad=sd["bad"], normalised=normalised)
    counters = (sd["optimizer_steps"], sd["skipped_windows"], last, hint, hint_counted)
    return window, counters, list(grads) if in_flight else None
