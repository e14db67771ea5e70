"""Drivers for ``gradguard.Accumulator(optimizer, steps, accelerator=acc)``.

An ``accelerate.Accelerator`` or a ``lightning.fabric.Fabric`` owns the
backward pass (mixed-precision loss scaling), gradient sync (``no_sync``) and
clipping (unscaling first) of the objects it prepared. The Accumulator keeps
the window's bookkeeping and its exact count weighting; the driver here routes
the rest through the accelerator, as the sync objects of
:mod:`gradguard.distributed` do for plain DDP:

* ``backward(loss)``: ``accelerator.backward(loss)`` / ``fabric.backward(loss)``;
* ``microbatch(ends_window)``: ``accelerator.no_sync(model)`` /
  ``fabric.no_backward_sync(model)`` on micro-batches that do not end the
  window (one gradient all-reduce per optimizer step);
* ``clip_grad_norm_``: ``accelerator.clip_grad_norm_`` / ``fabric.clip_gradients``;
* ``step(optimizer)``: the prepared optimizer's ``step()``, once per window;
* ``reduce_sum``: the global item count, one collective per window.

Only set-ups whose gradients live in each rank's ``.grad`` (one process, or
DDP) are driven; FSDP, Megatron-LM and XLA accumulate or step inside their
own engines, and are refused with an error. Under DeepSpeed the error says
to pass the prepared engine itself: ``gg.Accumulator(engine, steps)`` (see
:mod:`gradguard.deepspeed`).

The module imports neither framework: it reads the one the user already
imported from ``sys.modules``.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from typing import ContextManager, List, Optional

import torch

from ._errors import GradguardError
from .distributed import LocalSync, mean_over_ranks, weighted, zeroed_backward

__all__ = ["AccelerateSync", "FabricSync", "accelerator_sync"]

# A DeepSpeed engine keeps its gradients in ZeRO partitions and steps inside engine.step(): the
# Accumulator drives it directly (gradguard.deepspeed), not through the accelerator's backward.
_DEEPSPEED_INSTEAD = (
    "{who}: its backward() steps the DeepSpeed engine on every call, so the accelerator cannot be driven once per "
    "window. Drive the engine itself: gg.Accumulator(engine, steps), with engine {engine} "
    "(a deepspeed.DeepSpeedEngine) and {steps} equal to steps; call acc.backward(loss, count=n) and acc.step() "
    "instead of the accelerator's backward and optimizer.step()"
)
# Accelerate's distributed types whose gradients are plain per-rank .grad averaged by DDP.
_ACCELERATE_OK = {"NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU", "MULTI_HPU"}


class _AcceleratorSync(LocalSync):
    """What both drivers share: DDP-like averaging, a partial window's reduction, empty micro-batches."""

    def __init__(self, accelerator, model: Optional[torch.nn.Module], world_size: int) -> None:
        self.accelerator = accelerator
        self.model = model
        self.world_size = world_size
        # With several processes the accelerator wrapped the model in DDP, which averages.
        self.grads_averaged = world_size > 1
        # Deferring needs the prepared model (its no_sync); without one every micro-batch
        # syncs: still exact, only more all-reduces.
        self.defers_sync = world_size > 1 and model is not None
        # DDP's reducer waits for every rank: a 0-item micro-batch must still run backward.
        self.needs_empty_backward = world_size > 1
        # Several processes run DDP (the only multi-process mode either driver accepts), so the window's .grad
        # is checked as under DDPSync: outside a synchronised pass only autograd's accumulation writes it.
        self.checks_across_ranks = world_size > 1

    def empty_backward(self, loss: torch.Tensor, params: List[torch.Tensor]) -> None:
        if zeroed_backward(loss) == 0 and self.model is not None:
            # The loss does not depend on the model: give DDP an exact zero for every parameter.
            torch.autograd.backward(sum(p.sum() * 0 for p in self.model.parameters() if p.requires_grad))

    def finish_window(self, params: List[torch.Tensor], last_synced: bool) -> None:
        if last_synced or self.world_size == 1:
            return
        # A partial window stepped by flush() ended under no_sync: average as DDP would have.
        params = [p for p in params if p.requires_grad]
        reduced = mean_over_ranks([p.grad for p in params], params, [None], self.world_size)
        for p, g in zip(params, reduced):
            if g is None:
                continue
            if p.grad is None:
                p.grad = g
            else:
                p.grad.copy_(g)  # in place: DDP's gradient_as_bucket_view keeps .grad a view

    def __repr__(self) -> str:
        return f"{type(self).__name__}(world_size={self.world_size}, defers_sync={self.defers_sync})"


class AccelerateSync(_AcceleratorSync):
    """Drives an ``accelerate.Accelerator`` (one process, or multi-process DDP).

    Args:
        accelerator: the ``Accelerator`` that prepared the model and optimizer,
            built without ``gradient_accumulation_steps`` (the Accumulator does
            the accumulating).
        optimizer: the optimizer ``accelerator.prepare`` returned.
        model: the model ``accelerator.prepare`` returned (needed to defer
            gradient sync with several processes).
    """

    def __init__(self, accelerator, optimizer, model: Optional[torch.nn.Module] = None) -> None:
        from accelerate.optimizer import AcceleratedOptimizer

        kind = getattr(accelerator.distributed_type, "name", str(accelerator.distributed_type))
        if kind == "DEEPSPEED":
            raise GradguardError(_DEEPSPEED_INSTEAD.format(who="the Accelerator runs DeepSpeed", engine="the model accelerator.prepare() returned",
                                                           steps="the DeepSpeed plugin's gradient_accumulation_steps"))
        if kind not in _ACCELERATE_OK:
            raise GradguardError(
                f"the Accelerator runs with distributed_type={kind}, which accumulates or steps inside its own engine: "
                "gradguard.Accumulator(accelerator=...) drives one process or multi-process DDP only. "
                "Use the framework's own accumulation there, or drop the DeepSpeed/FSDP/Megatron plugin"
            )
        _check_no_accelerate_accumulation(accelerator)
        if not isinstance(optimizer, AcceleratedOptimizer):
            raise GradguardError(
                f"optimizer is a {type(optimizer).__name__}, not one that accelerator.prepare() returned: pass the prepared "
                "optimizer, e.g. model, opt = accelerator.prepare(model, opt); gg.Accumulator(opt, 4, accelerator=accelerator, model=model)"
            )
        super().__init__(accelerator, model, accelerator.num_processes)

    def microbatch(self, ends_window: bool) -> ContextManager:
        if ends_window or not self.defers_sync:
            return nullcontext()
        return self.accelerator.no_sync(self.model)

    def backward(self, loss: torch.Tensor, weight: float = 1.0) -> None:
        # Accelerate's state is shared by every Accelerator in the process: another one
        # built later with gradient_accumulation_steps would make backward() divide again.
        _check_no_accelerate_accumulation(self.accelerator)
        self.accelerator.backward(weighted(loss, weight))

    def clip_grad_norm_(self, params: List[torch.Tensor], max_norm: float) -> torch.Tensor:
        return self.accelerator.clip_grad_norm_(params, max_norm)

    def step(self, optimizer, scaler=None) -> None:
        if not self.accelerator.sync_gradients:
            # AcceleratedOptimizer.step() silently does nothing then.
            raise GradguardError(
                "accelerator.sync_gradients is False (the loop runs inside accelerator.accumulate()), so the prepared "
                "optimizer would skip its step: do not wrap micro-batches in accelerator.accumulate() when the "
                "Accumulator accumulates; use `with acc.microbatch():` instead"
            )
        optimizer.step()  # the AcceleratedOptimizer: GradScaler step and update under fp16

    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        return self.accelerator.reduce(t.clone(), reduction="sum")


class FabricSync(_AcceleratorSync):
    """Drives a ``lightning.fabric.Fabric`` (one device, or ``strategy="ddp"``).

    Args:
        fabric: the ``Fabric`` that set up the model and optimizer.
        optimizer: the optimizer ``fabric.setup`` (or ``setup_optimizers``) returned.
        model: the module ``fabric.setup`` returned (needed to defer gradient
            sync with several processes).
    """

    def __init__(self, fabric, optimizer, model: Optional[torch.nn.Module] = None) -> None:
        strategies = _fabric_module(fabric, "strategies")
        wrappers = _fabric_module(fabric, "wrappers")
        strategy = fabric.strategy
        if isinstance(strategy, strategies.DeepSpeedStrategy):
            raise GradguardError(_DEEPSPEED_INSTEAD.format(who="the Fabric runs strategy='deepspeed'", engine="fabric.strategy.model",
                                                           steps="the strategy's gradient_accumulation_steps"))
        if not isinstance(
            strategy, (strategies.SingleDeviceStrategy, strategies.DDPStrategy)
        ):
            raise GradguardError(
                f"the Fabric runs with {type(strategy).__name__}, which shards or steps gradients inside its own engine: "
                "gradguard.Accumulator(accelerator=fabric) drives one device or strategy='ddp' only"
            )
        if not isinstance(optimizer, wrappers._FabricOptimizer):
            raise GradguardError(
                f"optimizer is a {type(optimizer).__name__}, not one that fabric.setup() returned: pass the set-up optimizer, "
                "e.g. model, opt = fabric.setup(model, opt); gg.Accumulator(opt, 4, accelerator=fabric, model=model)"
            )
        if model is not None and not isinstance(model, wrappers._FabricModule):
            raise GradguardError(
                f"model is a {type(model).__name__}, not the module fabric.setup() returned: pass that one (its "
                "no_backward_sync defers DDP's gradient sync)"
            )
        super().__init__(fabric, model, fabric.world_size)
        self.optimizer = optimizer

    def microbatch(self, ends_window: bool) -> ContextManager:
        if ends_window or not self.defers_sync:
            return nullcontext()
        return self.accelerator.no_backward_sync(self.model, enabled=True)

    def backward(self, loss: torch.Tensor, weight: float = 1.0) -> None:
        self.accelerator.backward(weighted(loss, weight), model=self.model)

    def clip_grad_norm_(self, params: List[torch.Tensor], max_norm: float) -> torch.Tensor:
        # Fabric unscales (fp16) and clips the optimizer's parameters; never raise on inf:
        # the GradScaler's step skips such a window.
        return self.accelerator.clip_gradients(self.model, self.optimizer, max_norm=max_norm, error_if_nonfinite=False)

    def step(self, optimizer, scaler=None) -> None:
        optimizer.step()  # the _FabricOptimizer: the precision plugin's scaler step and update

    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        return self.accelerator.all_reduce(t.clone(), reduce_op="sum")


def accelerator_sync(accelerator, optimizer, *, model=None, scaler=None) -> LocalSync:
    """The driver for ``accelerator`` (an ``accelerate.Accelerator`` or a ``lightning.fabric.Fabric``).

    Raises:
        GradguardError: any other object, a ``scaler`` next to an accelerator
            (it owns the GradScaler), an ``Accelerator`` built with
            ``gradient_accumulation_steps`` > 1, a strategy or plugin that keeps
            gradients inside its own engine (DeepSpeed, FSDP, XLA), or an
            optimizer the accelerator did not prepare.

    >>> accelerator_sync(object(), None)
    Traceback (most recent call last):
    gradguard.GradguardError: accelerator must be an accelerate.Accelerator or a lightning.fabric.Fabric, got object
    """
    accelerate = sys.modules.get("accelerate")
    fabric_mods = [sys.modules.get(name) for name in ("lightning.fabric", "lightning_fabric")]
    if accelerate is not None and isinstance(accelerator, accelerate.Accelerator):
        driver = AccelerateSync
    elif any(m is not None and isinstance(accelerator, m.Fabric) for m in fabric_mods):
        driver = FabricSync
    else:
        raise GradguardError(
            f"accelerator must be an accelerate.Accelerator or a lightning.fabric.Fabric, got {type(accelerator).__name__}"
        )
    if scaler is not None:
        raise GradguardError(
            "scaler= was passed next to accelerator=: the accelerator owns the GradScaler (mixed precision 'fp16'/'16-mixed') "
            "and its backward scales the loss; drop scaler="
        )
    if model is not None and isinstance(model, LocalSync):
        raise GradguardError("with accelerator=, model must be the prepared model (or None), not a sync object")
    return driver(accelerator, optimizer, model)


def _check_no_accelerate_accumulation(accelerator) -> None:
    steps = accelerator.gradient_accumulation_steps
    if steps != 1:
        raise GradguardError(
            f"the Accelerator accumulates too (gradient_accumulation_steps={steps}): its backward() divides every loss by "
            f"{steps} and its prepared optimizer skips steps, so the Accumulator would count twice. Build the Accelerator "
            "without gradient_accumulation_steps and let gradguard.Accumulator(opt, steps, accelerator=accelerator) accumulate"
        )


def _fabric_module(fabric, name: str):
    """``lightning.fabric.<name>`` or ``lightning_fabric.<name>``, whichever package ``fabric`` comes from."""
    from importlib import import_module

    root = type(fabric).__module__.split(".fabric")[0] + ".fabric" if type(fabric).__module__.startswith("lightning.") else "lightning_fabric"
    return import_module(f"{root}.{name}")
