"""ExactAccumulation: Lightning's accumulated gradient weighted by each micro-batch's item count, every window."""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Integral
from typing import Any, Callable, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, GradientAccumulationScheduler
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature

from ..._errors import GradguardError
from ..._channel import accumulator_backward, listening

__all__ = ["ExactAccumulation", "default_count"]


def default_count(batch: Any) -> int:
    """The number of items in ``batch``: the dim-0 size of its first tensor.

    A tensor, or the first tensor found in a tuple, list or dict (Lightning hands
    ``(x, y)`` batches over as lists).

    >>> default_count([torch.zeros(5, 3), torch.zeros(5)])
    5
    """
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor) and batch[0].dim():
        return batch[0].shape[0]  # Lightning's usual (x, y) batch, first (per micro-batch)
    seen = [batch]
    while seen:
        item = seen.pop(0)
        if isinstance(item, torch.Tensor):
            if item.dim() == 0:
                raise GradguardError(
                    "the batch's first tensor is a scalar, so it has no item count along dim 0: "
                    "pass ExactAccumulation(count_fn=...) returning the number of items of a batch"
                )
            return int(item.shape[0])
        if isinstance(item, dict):
            seen = list(item.values()) + seen
        elif isinstance(item, (list, tuple)):
            seen = list(item) + seen
    raise GradguardError(
        f"found no tensor in the batch (a {type(batch).__name__}) to count its items: "
        "pass ExactAccumulation(count_fn=...) returning the number of items of a batch"
    )


class ExactAccumulation(Callback):
    """Make ``Trainer(accumulate_grad_batches=K)`` use the exact count-weighted window gradient.

    ``training_step`` returns its micro-batch's MEAN loss as usual. Every
    optimizer step then uses ``sum_i n_i * grad(mean_i) / sum_i n_i`` over the
    window's micro-batches (and over all DDP ranks), where ``n_i`` is
    ``count_fn(batch)``; the epoch's final partial window gets its true
    weights. ``gradient_clip_val`` clips that exact gradient;
    ``precision="16-mixed"``/``"bf16-mixed"``, LR schedulers and
    ``strategy="ddp"`` keep working. The exact window loss is kept in
    :attr:`loss` after every window and logged as ``log_name`` (default
    ``"window_loss"``) on the steps where Lightning writes its logs.

    Args:
        count_fn: ``batch -> int`` (or an integer 0-dim tensor): the items of
            the micro-batch the mean ran over (examples, or non-ignored target
            tokens). Default: :func:`default_count`, the dim-0 size.
        log_name: name under which the exact window loss is logged with
            ``LightningModule.log`` on the optimizer steps where Lightning
            writes its logs (every ``Trainer(log_every_n_steps=...)`` steps);
            None logs nothing.

    Raises:
        GradguardError: at ``fit`` start for ``accumulate_grad_batches=1``
            (nothing to accumulate), manual optimization, or a strategy that
            accumulates itself (DeepSpeed); during training for a count that
            is negative or not an integer.

    >>> cb = ExactAccumulation(count_fn=lambda batch: int((batch["labels"] != -100).sum()))
    >>> # trainer = L.Trainer(accumulate_grad_batches=8, callbacks=[cb])
    """

    def __init__(self, count_fn: Optional[Callable[[Any], Any]] = None, *, log_name: Optional[str] = "window_loss") -> None:
        if count_fn is not None and not callable(count_fn):
            raise GradguardError(f"count_fn must be a function batch -> number of items, got {type(count_fn).__name__}")
        self.count_fn = count_fn or default_count
        self.log_name = log_name
        self._ref_hint: Optional[float] = None
        self._loss: Any = None
        self._reset_window()
        # The window's micro-batch mean losses (detached) and their counts n, summed only when the
        # window loss is wanted (.loss, a logging step, a checkpoint): no tensor op per micro-batch.
        self._parts: list = []
        self._last_window: Optional[tuple] = None  # (parts, 1 / N) of the last window, until .loss is read
        self._weights: dict = {}  # count -> its micro-batch weight, made for the key below
        self._weights_for: Optional[tuple] = None  # (reference count, loss dtype, loss device)
        self._factors: dict = {}  # device -> the 0-dim tensor the window's factor is written into (one per fit)

    def _reset_window(self) -> None:
        self._n: Any = None  # the current micro-batch's count
        self._micro = 0  # backward passes in this window
        self._ref: Optional[float] = None  # the window's scale reference
        self._total: Any = 0  # items so far (an int, or a device tensor for tensor counts)
        self._negative: Optional[torch.Tensor] = None  # any negative tensor count (device flag)

    @property
    def loss(self) -> Optional[float]:
        """The exact mean loss of the last completed window (over all ranks), or None (also under DDP with
        ``log_name=None``, which leaves out the all-reduce of the loss)."""
        if isinstance(self._settled_loss(), torch.Tensor):
            self._loss = float(self._loss)
        return self._loss

    def _settled_loss(self) -> Any:
        """The last window's loss, summed now if it was left unsummed (a device tensor, a float or None)."""
        if self._last_window is not None:
            parts, scale = self._last_window
            self._last_window = None
            self._loss = _weighted_sum(parts) * scale
        return self._loss

    # -------------------------------------------------------------- set-up
    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if stage != "fit":
            return
        mine = [cb for cb in trainer.callbacks if isinstance(cb, ExactAccumulation)]
        if len(mine) > 1:
            # Each would multiply every micro-batch's gradient by its count and rescale the window:
            # two of them apply the weights twice (39-45 % off in a measured run).
            raise GradguardError(
                f"the Trainer has {len(mine)} ExactAccumulation callbacks; each reweights every gradient, so together "
                "they apply the weights twice: pass a single ExactAccumulation(count_fn=...) in Trainer(callbacks=[...])"
            )
        if not pl_module.automatic_optimization:
            raise GradguardError(
                "ExactAccumulation works with Lightning's automatic optimization; this module sets "
                "automatic_optimization = False: accumulate in training_step with gradguard.Accumulator instead"
            )
        scheduled = any(isinstance(cb, GradientAccumulationScheduler) for cb in trainer.callbacks)
        if trainer.accumulate_grad_batches == 1 and not scheduled:
            raise GradguardError(
                "ExactAccumulation does nothing with accumulate_grad_batches=1 (every batch is its own step, already "
                "exact): pass Trainer(accumulate_grad_batches=K) with K > 1, or remove the callback"
            )
        if is_param_in_hook_signature(type(pl_module).training_step, "dataloader_iter", explicit=True):
            raise GradguardError(
                "ExactAccumulation counts each batch before training_step runs, but this training_step takes "
                "dataloader_iter and fetches its batches itself: take (batch, batch_idx) in training_step, or "
                "accumulate in training_step with gradguard.Accumulator and manual optimization"
            )
        if trainer.strategy.handles_gradient_accumulation:
            raise GradguardError(
                f"the strategy {type(trainer.strategy).__name__} accumulates gradients inside its own engine, "
                "where a callback cannot reweight them: ExactAccumulation supports single-device and DDP strategies. "
                "For DeepSpeed, train the engine from deepspeed.initialize with gradguard.Accumulator(engine, steps) "
                "(exact at ZeRO stages 0-3), or use strategy='ddp' with this callback"
            )
        self._ref_hint = None
        self._reset_window()
        self._weights, self._weights_for = {}, None
        self._factors = {}
        self._world = trainer.world_size
        # Looked up once per fit: whether the backward that runs is Lightning's own (it takes loss.backward's
        # arguments) or the module overrides it (then the loss it gets is multiplied instead).
        self._seed = type(pl_module).backward is pl.LightningModule.backward
        self._install(trainer)
        self._mute_unused_hooks()

    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        self._uninstall()
        self._unmute_hooks()

    # Per-step hooks this callback does not use. Lightning calls every hook of every callback, each inside its
    # profiler's context (2-3 us a call): with the four of every micro-batch and the two of every optimizer step,
    # that dispatch costs more than this callback's own work. Its dispatcher calls a hook only if it is callable,
    # so for a fit these are set to None on the instance, and Lightning skips them: the callback counts each batch
    # and keeps its loss in the routed training_step, and closes the window in on_before_optimizer_step, its only
    # per-step hook. Only hooks the class leaves to Callback, and only where a probe shows that the running
    # Lightning skips a None hook.
    _UNUSED_STEP_HOOKS = ("on_train_batch_start", "on_before_backward", "on_after_backward", "on_before_zero_grad",
                          "on_train_batch_end")

    def _mute_unused_hooks(self) -> None:
        if not _lightning_skips_none_hooks():
            return
        for name in self._UNUSED_STEP_HOOKS:
            if getattr(type(self), name) is getattr(Callback, name):
                setattr(self, name, None)

    def _unmute_hooks(self) -> None:
        for name in self._UNUSED_STEP_HOOKS:
            if name in self.__dict__ and self.__dict__[name] is None:
                delattr(self, name)

    # ----------------------------------------------------------- per batch
    def _install(self, trainer) -> None:
        """Route the strategy's ``training_step`` through :meth:`_training_step` and the precision plugin's
        ``backward`` (the call that runs ``loss.backward()``) through :meth:`_backward` for this fit;
        :meth:`_uninstall` puts Lightning's own back. Lightning looks both up on its objects at every call."""
        self._uninstall()
        self._trainer = trainer
        strategy = trainer.strategy
        plugin = strategy.precision_plugin
        self._strategy, self._strategy_training_step = strategy, strategy.training_step
        strategy.training_step = self._training_step  # an instance attribute over the class's method
        self._plugin, self._plugin_backward = plugin, plugin.backward
        plugin.backward = self._backward

    def _uninstall(self) -> None:
        strategy, self._strategy = self._strategy, None
        if strategy is not None and strategy.__dict__.get("training_step") == self._training_step:
            del strategy.training_step
        plugin, self._plugin = self._plugin, None
        if plugin is not None and plugin.__dict__.get("backward") == self._backward:
            del plugin.backward
        self._trainer = None

    def _training_step(self, batch: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Lightning's training step, with the batch counted before it (for the backward that follows) and its
        loss kept after it (for the window loss). In place of a callback's on_train_batch_start and
        on_train_batch_end: no hook dispatch per micro-batch."""
        n = self._n = self._count(batch)
        out = self._strategy_training_step(batch, *args, **kwargs)
        # The module's own mean loss: a tensor, or a dict's "loss" (None skips the batch: no backward, no part).
        loss = out if isinstance(out, torch.Tensor) else out.get("loss") if isinstance(out, Mapping) else None
        if isinstance(loss, torch.Tensor):
            self._loss_dtype = loss.dtype
            self._parts.append((loss.detach(), n))
        return out

    def _backward(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Back-propagate ``tensor`` (the loss Lightning divided by K, after the GradScaler under 16-mixed)
        weighted by ``n / ref``: every gradient of the micro-batch weighted by its count.

        Lightning's ``on_before_backward`` hooks (the user's included) have already seen the loss as Lightning
        made it; only the backward pass is weighted. No Python tensor hook: the weighting costs no Python in the
        autograd engine. Automatic optimization calls this with ``(tensor, module, optimizer)`` only, so the
        ``gradient`` keyword is free."""
        n = self._n
        if n is None:  # a backward outside a training batch (not ours to weigh)
            return self._plugin_backward(tensor, *args, **kwargs)
        self._n = None
        if self._ref is None:
            self._start_window(n, tensor)
        self._total = self._total + n
        self._micro += 1
        if type(n) is int:
            # One weight per count for the window's reference (a power of two, so the same from window to
            # window): made once, then looked up (no tensor made per micro-batch).
            weight = self._weights.get(n, _MISSING)
            if weight is _MISSING:
                weight = self._weights[n] = self._weight(n, tensor)
        else:
            # A device count divides in float64 (float32 would round the weight; MPS has no float64).
            weight = n.to(torch.float32 if n.device.type == "mps" else torch.float64) / self._ref
            if self._seed:
                weight = weight.to(tensor.dtype)
        if weight is None:
            pass
        elif self._seed:
            # Lightning's own LightningModule.backward passes keyword arguments on to loss.backward: the weight
            # is the gradient the pass starts from (instead of the 1 it would make itself), nothing added to the graph.
            # Autograd reads it and never writes it (the cache holds a reference, so it is never taken over as a
            # .grad either), so one tensor serves every micro-batch with that count.
            kwargs["gradient"] = weight
        else:
            tensor = tensor * weight  # the module's own backward(loss): it back-propagates the weighted loss
        if not listening():
            return self._plugin_backward(tensor, *args, **kwargs)
        # A running gradguard.watch: this pass is weighted by its item count (no GG104/GG105).
        with accumulator_backward(counted=True):
            return self._plugin_backward(tensor, *args, **kwargs)

    def _start_window(self, n: Any, tensor: torch.Tensor) -> None:
        """The window's reference count; the cached weights stay only while the reference, the loss's dtype and
        its device are those they were made for."""
        ref = self._ref = self._reference(n, self._world)
        key = (ref, tensor.dtype, tensor.device)
        if key != self._weights_for:
            self._weights, self._weights_for = {}, key

    def _weight(self, n: int, tensor: torch.Tensor) -> Any:
        """Micro-batch weight ``n / ref``: None for 1, the backward's starting gradient (in the loss's dtype, on its
        device) under Lightning's own backward, else a float the loss is multiplied by."""
        if n == self._ref:
            return None
        if self._seed:
            return torch.full((), n / self._ref, dtype=tensor.dtype, device=tensor.device)
        return n / self._ref

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        """Before clipping and the step (after the GradScaler's unscale): the window's gradient rescaled to the exact
        count-weighted mean, and the window closed (its loss kept, and logged when Lightning logs this step)."""
        if self._micro == 0:
            self._parts = []
            return
        k = trainer.accumulate_grad_batches
        world = self._world  # looked up once per fit, in setup
        total = self._total
        negative = self._negative
        if world > 1 or isinstance(total, torch.Tensor):
            # One collective per window: the global count and the negative-count flag,
            # read back once (float64: token totals above 2**24 stay exact).
            both = torch.zeros(2, dtype=torch.float64, device=pl_module.device)
            both[0] += total if not isinstance(total, torch.Tensor) else total.to(both.device, torch.float64)
            if negative is not None:
                both[1] += negative.to(both.device, torch.float64)
            if world > 1:
                both = trainer.strategy.reduce(both, reduce_op="sum")
            total, neg = both.tolist()
            if neg:
                raise GradguardError(
                    f"count_fn returned a negative count in the window ending at global step {trainer.global_step}: "
                    "it must return the number of items (>= 0) of each batch"
                )
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        factor = self._ref * k * world / total if total > 0 else 0.0  # a window without items: no update direction
        if factor != 1.0 and grads:
            _rescale(grads, factor, self._factors)
        if total > 0:
            # The next windows' reference: a power of two near this window's global mean count, kept while the
            # mean stays within a factor 2 of it (so the cached weights last; the same on every rank).
            mean, hint = total / (self._micro * world), self._ref_hint
            if hint is None or not 0.5 * hint <= mean <= 2.0 * hint:
                self._ref_hint = _power_of_two(mean)
        self._reset_window()
        self._close_window(trainer, pl_module, total, world)

    def _close_window(self, trainer, pl_module, total: float, world: int) -> None:
        """The window loss ``sum_i n_i * mean_i / N`` (over all ranks) kept for :attr:`loss`, and logged on the steps
        where Lightning writes its logs. Every micro-batch's loss is in: the stepping one's training_step ran in the
        closure that precedes this hook."""
        parts, self._parts = self._parts, []
        if not parts or total <= 0:
            return
        logs = bool(self.log_name) and _lightning_logs_now(trainer)
        if world == 1:
            if not logs:
                self._last_window, self._loss = (parts, 1 / total), None  # summed if .loss is read
                return
            value = _weighted_sum(parts) * (1 / total)
        elif self.log_name:
            # Each rank's share times world_size / N: the mean over ranks is the exact window loss. One
            # all-reduce per window (in float64), so that .loss is exact on every rank after every window.
            value = trainer.strategy.reduce(_weighted_sum(parts) * (world / total), reduce_op="mean")
        else:
            return  # log_name=None under DDP: no collective for the loss, and no .loss
        self._loss, self._last_window = value, None  # a device tensor: read (one host read) only when .loss is
        if logs:
            # Only on the steps Lightning writes its logs (log_every_n_steps): LightningModule.log costs
            # more than the rest of this callback together, and a value logged in between is never
            # written. In the loss's own precision (a float32 copy of a float64 loss would be 3e-8 off .loss).
            # Not on the progress bar: Lightning turns every progress-bar value into a Python number after
            # every micro-batch for the rest of the epoch (a host read each, a device sync on a GPU).
            pl_module.log(self.log_name, value.to(self._loss_dtype), on_step=True, on_epoch=False, prog_bar=False,
                          batch_size=1)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._uninstall()
        self._unmute_hooks()

    # --------------------------------------------------------- checkpoints
    # A checkpoint saved in the middle of a window (a time-based ModelCheckpoint, OnExceptionCheckpoint)
    # holds the window so far: its counts, its reference, its loss sum and the gradients accumulated in
    # .grad, which Lightning itself does not save. Resuming puts them back before the next micro-batch.
    def state_dict(self) -> dict:
        return {"micro": self._micro, "ref": self._ref, "total": self._total, "negative": self._negative,
                "ref_hint": self._ref_hint, "loss_sum": _weighted_sum(self._parts) if self._parts else None,
                "loss": self._settled_loss()}

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        state = checkpoint.get("callbacks", {}).get(self.state_key)
        if state is not None and self._micro > 0:
            state["grads"] = [None if p.grad is None else p.grad.detach().clone() for p in pl_module.parameters()]

    def load_state_dict(self, state_dict: dict) -> None:
        self._micro = state_dict["micro"]
        self._ref = state_dict["ref"]
        self._weights, self._weights_for = {}, None  # made again for the resumed window's reference
        self._total = state_dict["total"]
        self._negative = state_dict["negative"]
        self._ref_hint = state_dict["ref_hint"]
        self._parts = [] if state_dict["loss_sum"] is None else [(state_dict["loss_sum"], 1)]
        self._loss = state_dict["loss"]
        self._last_window = None
        self._resumed_grads = state_dict.get("grads")

    def on_train_start(self, trainer, pl_module) -> None:
        grads, self._resumed_grads = self._resumed_grads, None
        if grads is None:
            return
        params = list(pl_module.parameters())
        if len(grads) != len(params):
            raise GradguardError(
                f"the checkpoint's ExactAccumulation state holds gradients for {len(grads)} parameters, but the model "
                f"has {len(params)}: resume with the model that saved it"
            )
        for p, g in zip(params, grads):
            p.grad = None if g is None else g.to(device=p.device, dtype=p.dtype)
        device = pl_module.device
        if isinstance(self._total, torch.Tensor):
            self._total = self._total.to(device)
        if self._negative is not None:
            self._negative = self._negative.to(device)
        self._parts = [(t.to(device), w) for t, w in self._parts]

    # ------------------------------------------------------------- helpers
    _plugin: Any = None  # the precision plugin whose backward this callback routes, during a fit
    _strategy: Any = None  # the strategy whose training_step this callback routes, during a fit
    _trainer: Any = None  # the fitting trainer (for the batch index in an error message)
    _world: int = 1
    _seed = False  # the weight goes in as loss.backward's gradient (Lightning's own LightningModule.backward)
    _loss_dtype: torch.dtype = torch.float32
    _resumed_grads: Optional[list] = None

    def _count(self, batch: Any) -> Any:
        n = self.count_fn(batch)
        if type(n) is int and n >= 0:  # the common case, first (per micro-batch)
            return n
        if isinstance(n, torch.Tensor):
            if n.numel() != 1 or n.is_floating_point() or n.is_complex() or n.dtype == torch.bool:
                raise GradguardError(
                    f"count_fn returned a {n.dtype} tensor of shape {tuple(n.shape)} for batch {self._batch_idx()}: "
                    "return the number of items as an int or an integer 0-dim tensor (e.g. (labels != -100).sum())"
                )
            n = n.reshape(())
            # Checked on the device; read once per window with the total (no sync per batch).
            flag = n < 0
            self._negative = flag if self._negative is None else (self._negative | flag)
        elif isinstance(n, bool) or not isinstance(n, Integral):
            raise GradguardError(
                f"count_fn returned {n!r} for batch {self._batch_idx()}: it must return the number of items as an int "
                "(examples, or non-ignored target tokens), or an integer 0-dim tensor"
            )
        elif n < 0:
            raise GradguardError(f"count_fn returned {n} for batch {self._batch_idx()}: a number of items must be >= 0")
        else:
            n = int(n)
        return n

    def _batch_idx(self) -> Any:
        """The running batch's index in its epoch (for an error message)."""
        try:
            return self._trainer.fit_loop.epoch_loop.batch_idx
        except AttributeError:
            return "?"

    def _reference(self, first: Any, world: int) -> float:
        if self._ref_hint is not None:
            return self._ref_hint  # the last window's global mean count: the same on every rank
        if world > 1 or isinstance(first, torch.Tensor) or first == 0:
            return 1.0  # ranks must scale alike; a device count is not read just for a scale
        return _power_of_two(first)


_MISSING = object()


def _power_of_two(count: float) -> float:
    """The power of two nearest ``count`` (> 0) on a log scale: a reference count that keeps gradient magnitudes
    near a plain mean's and divides every count exactly."""
    return 2.0 ** round(math.log2(count))


def _rescale(grads: list, factor: float, factors: Optional[dict] = None) -> None:
    """Multiply every gradient in ``grads`` by ``factor`` in place.

    For 16-bit gradients the factor is a 0-dim float64 tensor, not a Python float: the float32 product rounded once
    (with a Python float, _foreach_mul_ first rounds the factor itself to the 16-bit type: up to 0.2 % off in
    bfloat16). For float32 and float64 gradients both give the same products (the factor is rounded to the
    gradients' compute type either way) and the float is cheaper: no tensor written per window. A model split over
    devices (model parallel, a layer on the CPU) has gradients on several, and a factor made on one device is not
    for another's gradients: one factor per device, one call per (device, dtype) group (a mixed list would leave
    foreach's fused path). ``factors`` (device -> 0-dim tensor), if given, keeps each device's factor tensor from
    window to window: the value is written into it (``fill_``, queued on the device like the multiply that reads
    it) instead of a new tensor made every window.
    """
    first = grads[0]
    device, dtype = first.device, first.dtype
    for g in grads:
        if g.device != device or g.dtype != dtype:
            break
    else:  # one device, one dtype: the common case
        # float32 and float64 gradients: a Python float gives the same products (checked bit for bit) without
        # a tensor to write (the cheaper call on a small model); 16-bit ones: the float64 tensor.
        torch._foreach_mul_(grads, factor if dtype in _WIDE else _factor(factor, device, factors))
        return
    groups: dict = {}
    for g in grads:
        groups.setdefault((g.device, g.dtype), []).append(g)
    made: dict = {}
    for (device, _), group in groups.items():
        if device not in made:
            made[device] = _factor(factor, device, factors)
        torch._foreach_mul_(group, made[device])


_WIDE = (torch.float32, torch.float64)  # gradient dtypes a Python float factor multiplies as a float64 tensor does


def _factor(factor: float, device: torch.device, factors: Optional[dict] = None) -> torch.Tensor:
    """``factor`` as a 0-dim tensor on ``device``: float64, float32 on MPS (which has no float64); written into
    ``factors[device]`` when ``factors`` holds one (and kept there when it does not)."""
    kept = None if factors is None else factors.get(device)
    if kept is not None:
        return kept.fill_(factor)
    made = torch.full((), factor, device=device, dtype=torch.float32 if device.type == "mps" else torch.float64)
    if factors is not None:
        factors[device] = made
    return made


_SKIPS_NONE_HOOKS: Optional[bool] = None


def _lightning_skips_none_hooks() -> bool:
    """Whether the running Lightning's callback dispatch skips a hook that is None (it calls only callable ones).

    Probed once per process: the dispatcher run on a stand-in trainer holding one callback whose hook is None.
    Any error (a None called, another signature) reads as no: the hooks then stay as they are."""
    global _SKIPS_NONE_HOOKS
    if _SKIPS_NONE_HOOKS is None:
        from types import SimpleNamespace

        probe = Callback()
        probe.on_before_zero_grad = None
        try:
            from lightning.pytorch.profilers import PassThroughProfiler
            from lightning.pytorch.trainer import call

            call._call_callback_hooks(SimpleNamespace(lightning_module=None, callbacks=[probe],
                                                      profiler=PassThroughProfiler()), "on_before_zero_grad", None)
            _SKIPS_NONE_HOOKS = True
        except Exception:
            _SKIPS_NONE_HOOKS = False
    return _SKIPS_NONE_HOOKS


def _weighted_sum(parts: list) -> torch.Tensor:
    """``sum(loss.double() * weight)`` over ``(loss, weight)`` pairs, in order, in float64 on their device."""
    total = None
    for loss, weight in parts:
        term = loss.double() * weight
        total = term if total is None else total + term
    return total


def _lightning_logs_now(trainer) -> bool:
    """Whether Lightning writes the step's logged metrics after this ``on_train_batch_end``.

    Its own test (``_LoggerConnector.should_update_logs``: every ``log_every_n_steps`` optimizer steps,
    or when training stops), asked in the same state Lightning asks it in right after this hook;
    ``fast_dev_run`` writes every step. A Lightning without that test: every step, as before.

    Asking that test costs some 7 us (its running-stage checks compare enums in Python), on every window; most
    windows are not logging steps, and Lightning's step count answers for them first: for a fit, its test is
    ``(_batches_that_stepped + 1) % log_every_n_steps == 0 or should_stop``, so when that count is there and the
    remainder is not 0, training is not stopping and it is no ``fast_dev_run``, the answer is no without asking.
    Every other case asks Lightning (``tests/test_integrations_lightning.py`` checks the two agree on every step).
    """
    every = getattr(trainer, "log_every_n_steps", None)
    if type(every) is int and every > 0 and not getattr(trainer, "should_stop", True) \
            and not getattr(trainer, "fast_dev_run", True):
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        stepped = getattr(loop, "_batches_that_stepped", None)
        if type(stepped) is int and (stepped + 1) % every:
            return False
    connector = getattr(trainer, "_logger_connector", None)
    should = getattr(connector, "should_update_logs", True)
    return bool(should) or bool(getattr(trainer, "fast_dev_run", False))
