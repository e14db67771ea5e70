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
The weight is not multiplied into the loss: the backward pass starts from it
(``torch.autograd.backward(loss, weight)``; a GradScaler scales ``loss * weight``,
and an accelerator's or DeepSpeed's own backward gets ``loss * weight``), which is
the gradient of ``loss * weight`` bit for bit, without the multiply and its autograd node.

Host reads (each stalls the CPU until a GPU catches up): with int counts (or
None) a window reads the device once, at its end: the loss sum (finite? the
window's mean loss) together with anything else the window needs, in one
transfer. A non-finite loss is found there; under ``nonfinite="raise"`` the
window is then discarded before anything is applied and the error names the
micro-batch (losses in host memory are read there one by one: no transfer, no
sync). ``nonfinite="raise_early"`` checks each loss in ``backward()``
instead (one read per micro-batch, before ``.grad`` is touched). A count
given as a tensor is read in ``backward()`` only with ``reduction="mean"``,
where a 0-item micro-batch's 0/0 must be kept out of ``.grad``; with
``reduction="sum"`` it stays on the device until the window's read.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from operator import attrgetter, is_, sub
from typing import Iterator, List, Optional, Tuple, Union

import torch

from ._errors import GradguardError
from .distributed import sync_for
from .deepspeed import is_deepspeed_engine
from ._channel import accumulator_backward, accumulator_clearing, listening
from . import _window
from ._window import Window
from ._options import LARGEST_FLOAT as _LARGEST_FLOAT, Count, check_options, count_value as _count_value
from ._reach import Reach
from ._self_check import SelfCheck, grad_of, has_grad, version_of
from ._undo import Undo, grad_marks, reached_by_pass

_is_cpu = attrgetter("is_cpu")
# A count more than this many times the scale reference rescales the in-flight sum first
# (one process only: ranks must scale alike), so a weight stays below it / steps.
_REBASE_RATIO = 64


class Accumulator(Reach, SelfCheck, Undo):
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
        check_options(optimizer, steps, scheduler=scheduler, scaler=scaler, max_grad_norm=max_grad_norm,
                      nonfinite=nonfinite, engine_sync=engine_sync, accelerator=accelerator)
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
        self._w = Window()
        self._init_reach()
        self._init_self_check()
        # One process may rescale the in-flight sum when a count dwarfs the reference (ranks must scale alike).
        # (and only where the in-flight sum is in .grad: a DeepSpeed engine under ZeRO 1-3 keeps it in partitions).
        self._may_rebase = self._sync.world_size == 1 and self._sync.grads_in_params

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

    @property
    def world_size(self) -> int:
        """Number of processes whose micro-batches form one window (1 without DDP, FSDP2 or an accelerator)."""
        return self._sync.world_size

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
            GradguardError: non-scalar loss, loss without grad, a negative or
                non-finite count, a count that is not an int, a float or a 0-dim
                tensor with a value (a ``Fraction``, a meta tensor), NaN/Inf loss
                (``nonfinite="raise_early"``), a second backward for the same
                micro-batch (also after a window end that raised and was undone:
                call ``step()`` again first), or mixing counted and uncounted
                micro-batches in one window: nothing is changed then.

        Warns:
            UserWarning: once, on the first backward, when the loss also reaches
                tensors requiring grad that the optimizer does not hold (their
                ``.grad`` is never normalised nor cleared by the Accumulator).
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
        # Validate everything before touching any state or .grad. The common case (an int
        # count, grad mode on, no scaler) takes the shortest path: a hand loop's work plus
        # one detach and a list append (the loss sum is formed once, at the window's end).
        w = self._w
        if w.has_backward:
            raise self._second_backward_error()
        if reduction != "mean" and reduction != "sum":
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
        if loss.is_complex():
            raise GradguardError(
                f"loss is complex ({loss.dtype}): a gradient needs a real loss to descend; "
                "reduce it to a real number first (loss.abs() or loss.real)"
            )
        if type(count) is int and 0 <= count <= _LARGEST_FLOAT:
            n, pending = count, None
        else:
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
                synced = self._synced_checks and not w.in_no_sync and self._seen is not None
                if synced:
                    self._check_untouched("backward()")
                self._sync.empty_backward(loss, self._params())
                if synced:
                    self._record()  # what the synchronised pass did to .grad is its own
                else:
                    self._since += 1  # it added zeros in place
            w.last_synced = not w.in_no_sync
            w.counted = counted
            w.has_backward = True
            return

        detached = loss.detach()  # the value without the graph (a view, no kernel): kept for the window's read
        if self.nonfinite == "raise_early" and not bool(torch.isfinite(detached)):
            raise GradguardError(
                f"loss is {detached.item()} at micro-batch {w.micro} of window {self.optimizer_steps}: "
                "nothing was back-propagated; find the cause (learning rate, bad data, log of 0), "
                "or construct the Accumulator with nonfinite='skip' to drop such windows"
            )

        items = n if counted else 1  # a pending tensor count is 0 here: it is not known yet
        ref = w.ref
        if ref is None:
            ref = self._reference(items if pending is None else 1, counted)
        rebase = pending is None and self._may_rebase and items > _REBASE_RATIO * ref
        if rebase:
            ref = items  # rescales the in-flight sum below, once this micro-batch is sure to run
        # The weight seeds the backward pass (see LocalSync.backward): no multiply, no extra autograd node.
        weight = (items if reduction == "mean" else 1) / (ref * self.steps)
        scaled = loss
        if self.scaler is not None:
            # Weighted first, then scaled: the GradScaler's factor stays the top of the graph,
            # where unscale_ and a running watch expect it; the pass then starts from 1.
            with torch.enable_grad():  # acc.backward() inside torch.no_grad() works, as loss.backward() does
                scaled = self.scaler.scale(loss * weight if weight != 1 else loss)
            weight = 1.0
        if not w.contributed:
            self._start_window(loss)
        elif rebase:
            grads = [p.grad for p in self._params() if p.grad is not None]
            if grads:
                if self._seen is not None:
                    self._check_untouched("backward()")  # what the rescale rewrites is checked first
                self._scale_grads(grads, w.ref / ref)
                if self._seen is not None:
                    self._record()
        synced = self._synced_checks and not w.in_no_sync
        if synced and self._seen is not None:
            self._check_untouched("backward()")  # before the pass rewrites .grad (noted, refused at the window's end)
        reached = self._reached_by
        reached.clear()
        # Tell a running gradguard.watch that this loss is weighted (or not); unwatched, skip the mark.
        mark = accumulator_backward(counted=counted, weight=weight) if listening() else None
        if mark is not None:
            mark.__enter__()
        try:
            self._sync.backward(scaled, weight)
        except BaseException as exc:
            if mark is not None:
                mark.__exit__(None, None, None)
            if self._undo_failed_backward() or not isinstance(exc, Exception):
                raise
            raise GradguardError(
                f"backward() of micro-batch {w.micro} failed halfway ({type(exc).__name__}: {exc}) after earlier "
                "micro-batches of this window had reached .grad; what the failed pass added cannot be told apart "
                "from them, so the window was discarded (nothing applied, its gradients cleared, "
                "skipped_windows + 1). Training can go on: the next backward() starts a new window"
            ) from exc
        if mark is not None:
            mark.__exit__(None, None, None)

        # The backward pass succeeded: only now does the window take this micro-batch.
        if not self._after_pass(reached, scaled) and w.unreached is None:
            w.unreached = w.micro  # decided at the window's end, on every rank alike
        if synced or (self._synced_checks and self._seen is None):
            self._record()  # what a synchronised pass did to .grad is its own
        elif self._seen is not None:
            self._since += 1
        elif self._checks:  # the window's first pass: what it left (see _seen in _self_check.py), one C loop
            seen = self._seen = list(map(grad_of, self._wparams))
            self._seen_versions = list(map(version_of, filter(has_grad, seen)))
            self._since = 0
        w.ref = ref
        w.contributed = True
        w.last_synced = not w.in_no_sync
        w.counted = counted
        w.has_backward = True
        w.total += items
        if pending is not None:
            w.pending_counts.append((w.micro, pending))
        w.losses.append((w.micro, detached, float(items) if reduction == "mean" else 1.0))
        w.end_failed = None

    def _second_backward_error(self) -> GradguardError:
        w = self._w
        if w.end_failed is not None:
            return GradguardError(
                f"the end of this window (acc.step() or acc.flush()) raised {w.end_failed} and was undone, so the "
                f"window still holds its {w.micro + 1} micro-batches: call acc.step() again (or acc.flush()) to end it "
                "before the next micro-batch's backward()"
            )
        return GradguardError(
            f"backward() was already called for micro-batch {w.micro} of this window: "
            "call acc.step() after each micro-batch's backward(), or add the micro-batch's losses and call backward() once"
        )

    def _start_window(self, loss: torch.Tensor) -> None:
        """Before the window's first contribution: mark .grad (to undo a failed pass), check what the loss reaches."""
        params = self._wparams = self._params()
        self._w.start_grads = grad_marks(params)
        if self._hooked != len(params):
            self._hook(params)
            self._report_outside_leaves(loss, params)
        elif self._sentinel is None and self._common and self._hooks_fire:
            # A window went by in which every pass reached these parameters: keep one of them hooked
            # (one that still needs a gradient: no hook can be put on a parameter frozen since).
            sentinel = next((p for p in params if id(p) in self._common and p.requires_grad), None)
            if sentinel is not None:
                self._hook(params, sentinel=sentinel)

    def _reference(self, first_count: float, counted: bool) -> float:
        if self._ref_hint is not None and self._hint_counted == counted:
            # The last window's global mean count: the same on every rank (it comes
            # from the all-reduced total), and steady where first counts vary.
            return self._ref_hint
        # Ranks must scale identically before their gradients are averaged, and they
        # see different counts: the distributed first window uses 1 on every rank.
        return 1 if self._sync.world_size > 1 else first_count

    # ------------------------------------------------------------------ step
    def step(self) -> bool:
        """End the current micro-batch; at the window's end, apply the exact update.

        Returns:
            True when the optimizer stepped.

        Raises:
            GradguardError: when no ``backward()`` was made for this micro-batch
                (use ``acc.backward(loss, count=0)`` for an empty one); at the
                window's end, for a NaN/Inf loss (``nonfinite="raise"``), an invalid
                tensor count, or a micro-batch whose loss reached none of the
                optimizer's parameters: the window is discarded then, nothing applied.
            Any exception of the update itself (an out-of-memory error in the
            optimizer, a KeyboardInterrupt): the window's end is undone, so
            ``.grad`` and the Accumulator are as before the call and calling
            ``step()`` again ends the window exactly; when clipping or a
            GradScaler had already rewritten ``.grad``, the window is discarded
            instead, with a :class:`GradguardError` saying so.
        """
        w = self._w
        if not w.has_backward:
            raise GradguardError(
                f"step() called without backward() for micro-batch {w.micro}: one backward() then one step() per micro-batch "
                "(for a micro-batch with no items, call acc.backward(loss, count=0))"
            )
        if self._ends_window(w.micro):
            return self._end_window("step()")
        w.micro += 1
        w.has_backward = False
        return False

    def flush(self) -> bool:
        """Step a partial window (fewer than ``steps`` micro-batches) with its exact weights.

        Call it after the last micro-batch of an epoch or of training. A
        micro-batch that had ``backward()`` but no ``step()`` yet is included.
        Raises as :meth:`step` does at a window's end.

        Returns:
            True when the optimizer stepped; False when nothing was pending.
        """
        if not self._w.in_flight:
            return False
        return self._end_window("flush()")

    def _end_window(self, caller: str) -> bool:
        """End the window (its micro-batches: ``micro``, plus the current one if it had a backward).

        All or nothing: what raises before the optimizer step leaves ``.grad`` and
        the window as they were (the normalising multiply undone), or discards the
        window when that is impossible; nothing here changes the window's counters
        until the update is through.
        """
        w, sync = self._w, self._sync
        seen = self._seen
        if seen is not None and not (  # the common case inline: every .grad the window's passes can have left
                all(map(is_, map(grad_of, self._wparams), seen))
                and max(map(sub, map(version_of, filter(has_grad, seen)), self._seen_versions), default=0) <= self._since):
            self._check_untouched(f"{caller} that ends the window")
        if w.touched is None and hasattr(sync, "touched"):
            w.touched = sync.touched()  # a change where the driver keeps the window (DeepSpeed ZeRO-3's partitions)
        micro_batches = w.micro + w.has_backward
        params = self._params()
        sync.finish_window(params, w.last_synced)
        w.last_synced = True  # a retried end must not reduce again

        total, loss_sum, bad, bad_count, unreached, found, touched = self._read_window(params)
        if touched:  # a rank found .grad changed behind the Accumulator (see _check_untouched), or a loaded state had
            message = w.touched or self._touched_elsewhere_message()
            self._drop_window()
            raise GradguardError(message)
        if bad_count:
            message = self._bad_count_message()
            self._drop_window()
            raise GradguardError(message)
        if bad:  # a loss of the window is NaN/Inf (only their weighted sum overflowing is no reason to stop)
            if self.nonfinite == "skip":
                return self._drop_window()
            if found is None:  # distributed: which of this rank's losses (a second read, on the error path only)
                found = self._nonfinite_loss()
            message = self._nonfinite_message(found)
            self._drop_window()
            raise GradguardError(message)
        if total == 0:
            return self._drop_window()
        if sync.world_size == 1 and sync.grads_in_params and not self._hooks_fire and not reached_by_pass(params, w.start_grads):
            # (Once the reach hooks are known to fire, the per-micro-batch check below covers this.)
            self._drop_window()
            raise GradguardError(
                "the window's losses reach none of the optimizer's parameters (no .grad of theirs changed): the loss "
                "comes from another model or from detached outputs, and stepping would move nothing. Pass the "
                "optimizer of the model the loss is computed from. The window was discarded"
            )
        if unreached:
            message = self._unreached_message()
            self._drop_window()
            raise GradguardError(message)
        if self.max_grad_norm is not None and any(p.grad is not None and p.grad.is_sparse for p in params):
            raise GradguardError(
                "max_grad_norm is set but some gradients are sparse (nn.Embedding(sparse=True)): "
                "torch.nn.utils.clip_grad_norm_ cannot clip sparse gradients; use max_grad_norm=None "
                "or a dense embedding. The window is kept: call acc.flush() after fixing the set-up"
            )

        # A rank whose window had 0 items never set a reference; use the one it would have.
        ref = w.ref if w.ref is not None else self._reference(1, bool(w.counted))
        factor = ref * self.steps * (sync.world_size if sync.grads_averaged else 1) / total
        grads = []
        if factor != 1.0 and not w.normalised:
            if sync.grads_in_params:
                grads = [g for g in map(grad_of, params) if g is not None]  # each .grad read once
            else:  # where the framework keeps the reduced gradient (DeepSpeed's partitions): no undo there,
                sync.scale_grads(params, factor)  # so a retried step() or flush() must not scale it again
                w.normalised = True
        before = [g._version for g in grads]
        after = None
        stepped = []
        try:
            if grads:
                self._scale_grads(grads, factor)
            after = [g._version for g in grads]
            if self.max_grad_norm is not None:
                self._unscale_and_clip(params)
            self._optimizer_step(stepped)
        except BaseException as exc:
            if not stepped:
                self._undo_end(exc, grads, factor, before, after)  # raises a GradguardError, or returns
                raise
            # The optimizer stepped and something after it raised: the window is over.
            self._close_window(stepped[0], loss_sum, total, micro_batches)
            raise
        # The optimizer has stepped (or the scaler skipped it): the window is over,
        # whatever fails after this (the scaler's update, a scheduler past its last step).
        try:
            if self.scaler is not None:
                self.scaler.update()
        finally:
            self._close_window(stepped[0], loss_sum, total, micro_batches)
        if stepped[0] and self.scheduler is not None:
            self.scheduler.step()
        return stepped[0]

    def _scale_grads(self, grads: List[torch.Tensor], factor: float, *, undo: bool = False) -> None:
        """Multiply the window's gradients by ``factor`` in place (``undo``: divide them by it).

        The one place the in-flight sum is scaled: the end-of-window normalisation,
        its undo when the update fails, and the rescale of a raised reference.
        """
        if undo:
            torch._foreach_div_(grads, factor)
        else:
            torch._foreach_mul_(grads, factor)

    def _close_window(self, stepped: bool, loss_sum: Optional[float], total: float, micro_batches: int) -> None:
        if stepped:
            self.optimizer_steps += 1
            self._last_loss = loss_sum / total if loss_sum is not None else None
        else:
            self.skipped_windows += 1
        self._ref_hint = total / (micro_batches * self._sync.world_size)
        self._hint_counted = bool(self._w.counted)
        self._clear_window()

    def _read_window(self, params: List[torch.Tensor]):
        """The window's numbers, in one host read: (total, loss sum, non-finite?, invalid count?, unreached?, first non-finite loss, .grad touched?).

        One process, int counts: the losses themselves are read (one small
        transfer; in host memory, one item() each), so the loss sum is formed
        and a non-finite loss named on the host. Otherwise a header is formed on the device first: item total (with
        counts still on the device), loss sum, non-finite flag, invalid-count
        flag, unreached flag, touched flag (a rank found its .grad changed behind the Accumulator); distributed, it is summed over ranks (one
        collective) in float64 on every rank: dtypes must match across ranks (a
        rank with 0 items has no loss dtype), and float32 rounds token totals
        above 2**24. Nothing is read when there is nothing to read.
        """
        w, sync = self._w, self._sync
        distributed = sync.world_size > 1
        losses = [l for _, l, _ in w.losses]
        simple = not (distributed or w.pending_counts or w.loss_sum is not None or w.bad is not None)
        if simple and not losses:
            return w.total, None, False, False, w.unreached is not None, None, w.touched is not None
        device = (losses[0].device if losses else w.loss_sum.device if w.loss_sum is not None
                  else w.pending_counts[0][1].device if w.pending_counts else _device_of(params))
        if simple:  # the window's one host read: the losses, in one transfer
            # (item() and tolist() give each value as an exact Python float whatever the loss dtype: no float64 kernel)
            if _in_host_memory(losses):
                values = [l.item() for l in losses]
            else:
                values = torch.stack([_on(l, device) for l in losses]).to("cpu", copy=True).tolist()
            loss_sum = 0.0
            found = None
            for (i, _, alpha), v in zip(w.losses, values):
                loss_sum += alpha * v
                if found is None and not math.isfinite(v):
                    found = i, v
            return w.total, loss_sum, found is not None, False, w.unreached is not None, found, w.touched is not None

        stacked = torch.stack([_on(l, device) for l in losses]).double() if losses else None
        zero = torch.zeros((), device=device, dtype=torch.float64)
        total, bad_count, loss_sum, bad = zero + float(w.total), zero, zero, zero
        if w.pending_counts:
            counts = torch.stack([_on(c.double(), device) for _, c in w.pending_counts])
            total = total + counts.sum()
            bad_count = (~torch.isfinite(counts) | (counts < 0)).any().double()
        if stacked is not None:
            alphas = [alpha for _, _, alpha in w.losses]
            weighted = stacked * alphas[0] if len(set(alphas)) == 1 else torch.stack(torch._foreach_mul(stacked.unbind(0), alphas))
            loss_sum = weighted.sum()
            bad = (~torch.isfinite(stacked)).any().double()
        if w.loss_sum is not None:
            loss_sum = loss_sum + _on(w.loss_sum.double(), device)
        if w.bad is not None:
            bad = bad + _on(w.bad.double(), device)
        vec = torch.stack([total, loss_sum, bad, bad_count, zero + float(w.unreached is not None), zero + float(w.touched is not None)])
        if distributed:
            vec = sync.reduce_sum(vec)  # every rank decides alike: all step, drop or raise
        elif stacked is not None:
            vec = torch.cat([vec, stacked])  # read the losses too: a non-finite one is named without a second read
        values = vec.to("cpu", copy=True).tolist()  # the window's one host read (a single transfer)
        t, s, b, c, u, d = values[:6]
        found = None
        if not distributed:
            found = next(((i, v) for (i, _, _), v in zip(w.losses, values[6:]) if not math.isfinite(v)), None)
        exact_total = w.total if not distributed and not w.pending_counts else t
        has_loss = stacked is not None or w.loss_sum is not None or distributed
        return exact_total, (s if has_loss else None), b > 0, c > 0, u > 0, found, d > 0

    def _nonfinite_loss(self) -> Optional[Tuple[int, float]]:
        """(micro-batch, value) of this rank's first non-finite loss in the window (a read, on the error path only)."""
        w = self._w
        if not w.losses:
            return None
        values = torch.stack([l.double() for _, l, _ in w.losses]).tolist()
        for (i, _, _), v in zip(w.losses, values):
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

    def _unreached_message(self) -> str:
        i = self._w.unreached
        where = f"micro-batch {i} of window {self.optimizer_steps}" if i is not None else \
            f"a micro-batch of window {self.optimizer_steps} on another rank"
        return (f"the loss of {where} reached none of the optimizer's parameters (no .grad of theirs changed): its "
                "items were counted but added nothing, so stepping would dilute the window's gradient. The loss comes "
                "from another model, from detached outputs, or from a branch the optimizer does not hold. Nothing was "
                "applied and the window was discarded (skipped_windows + 1); training can go on")

    def _bad_count_message(self) -> str:
        w = self._w
        values = torch.stack([c.double() for _, c in w.pending_counts]).tolist() if w.pending_counts else []
        for (i, _), v in zip(w.pending_counts, values):
            if not math.isfinite(v) or v < 0:
                return (f"count must be a finite number >= 0 (items in the micro-batch), got {v!r} at micro-batch {i} "
                        f"of window {self.optimizer_steps}: nothing was applied and the window's gradients were discarded")
        return (f"a count of window {self.optimizer_steps} on another rank is negative or not finite: nothing was "
                "applied and the window's gradients were discarded")

    def _unscale_and_clip(self, params: List[torch.Tensor]) -> None:
        """Unscale (with a GradScaler) and clip (``max_grad_norm`` is set): the true gradient is clipped."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        self.grad_norm = self._sync.clip_grad_norm_(params, self.max_grad_norm)

    def _optimizer_step(self, stepped: list) -> None:
        """Step; appends whether the optimizer stepped (False when the GradScaler skipped it)."""
        if self.scaler is None:
            self._sync.step(self.optimizer)
            stepped.append(True)
            return
        # scaler.step() calls optimizer.step() only when the gradients are finite: a
        # post-hook (public API, removed right after) sees whether it did.
        ran = []
        handle = self.optimizer.register_step_post_hook(lambda *_: ran.append(True))
        try:
            self._sync.step(self.optimizer, self.scaler)
        finally:
            handle.remove()
        stepped.append(bool(ran))

    def _clear_window(self) -> None:
        self._seen = self._seen_versions = None  # (first: the cleared gradients are freed inside zero_grad, as without it)
        if listening():
            with accumulator_clearing():  # a running watch knows this clearing is the Accumulator's own
                self.optimizer.zero_grad(set_to_none=self.set_to_none)
        else:
            self.optimizer.zero_grad(set_to_none=self.set_to_none)
        self._w = Window()

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
        if w.in_flight and self._seen is not None and w.touched is None:
            # A change to .grad not yet found (it is looked for before a synchronised pass and at the window's
            # end) would be taken as the window's own by the resumed run, which records .grad afresh: the
            # finding travels in the state instead, and the window is refused at its end, here or resumed.
            found = self._touched()
            if found is not None:
                w.touched = self._touched_message(*found, "state_dict()")
        if w.in_flight:
            # FSDP2 with deferred reduction keeps in-flight gradients inside FSDP:
            # the sync object brings them into .grad (a collective: call on every rank).
            self._sync.settle(self._params())
        grads = [p.grad.detach() if p.grad is not None else None for p in self._params()] if w.in_flight else []
        return _window.save(w, self.steps, {key: getattr(self, attr) for key, attr in _window.RUN_FIELDS.items()}, grads)

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
        window, run, grads = _window.load(state_dict, self.steps, params, single_process=self._sync.world_size == 1)
        # Convert every gradient first: a failure here must leave .grad as it was.
        try:
            new_grads = [None if g is None else g.detach().to(device=p.device, dtype=p.dtype, copy=True)
                         for p, g in zip(params, grads or [None] * len(params))]
        except (RuntimeError, TypeError) as exc:
            raise GradguardError(f"an in-flight gradient of the state cannot be moved to its parameter ({exc}): nothing was loaded") from exc
        if window.normalised:
            # Saved by an earlier gradguard after its window end had multiplied .grad by the end factor and the
            # step failed. The resumed loop may end the window (flush) or add micro-batches to it, and the
            # window's end would apply no factor to either: take the factor out again (on the copies), so
            # the window holds its plain weighted sum like any other and its end is exact whichever way.
            if self._sync.world_size != 1 or not self._sync.grads_in_params or not window.total or window.ref is None:
                raise GradguardError(
                    "the Accumulator state says its gradients are already normalised (normalised=True, saved by an "
                    f"earlier gradguard after a failed step) with total={window.total!r}, ref={window.ref!r}"
                    + (f" on {self._sync.world_size} processes" if self._sync.world_size != 1 else "")
                    + ": the factor that was applied cannot be taken out here, so resuming would mis-weight the window. "
                    "Nothing was loaded: resume from a state saved at a window boundary (acc.micro_step == 0)"
                )
            factor = window.ref * self.steps / window.total  # what that window's end multiplied .grad by (one process)
            for g in new_grads:
                if g is not None:
                    g.div_(factor)
            window.normalised = False
        window.contributed = any(g is not None for g in new_grads)
        window.start_grads = [] if window.contributed else None
        with accumulator_clearing():  # replacing .grad wholesale is this object's own doing
            for p, g in zip(params, new_grads):
                p.grad = g
        self._w = window
        self._wparams = params
        self._seen = self._seen_versions = None
        if window.contributed and self._checks:
            self._record()
        for key, attr in _window.RUN_FIELDS.items():
            setattr(self, attr, run[key])

    def __repr__(self) -> str:
        return (
            f"Accumulator(steps={self.steps}, micro_step={self._w.micro}, optimizer_steps={self.optimizer_steps}, "
            f"world_size={self.world_size})"
        )


def _in_host_memory(tensors: List[torch.Tensor]) -> bool:
    """Whether every tensor is in host memory, where reading a value is no transfer and no sync.

    There each loss is read on its own (cheaper than stacking them into a new tensor
    and copying it); on an accelerator the window's losses travel in one transfer.
    """
    return all(map(_is_cpu, tensors))


def _on(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t if t.device == device else t.to(device)


def _device_of(params: List[torch.Tensor]) -> torch.device:
    return params[0].device if params else torch.device("cpu")
