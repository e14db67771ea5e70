"""The Accumulator driving a DeepSpeed engine: ``gg.Accumulator(engine, steps)``.

DeepSpeed's own accumulation divides every micro-batch's loss by
``gradient_accumulation_steps`` (a mean of means: wrong for micro-batches of
unequal item counts) and cannot step an incomplete final window. Here the
engine keeps everything it owns (its ZeRO partitioning and reduction, loss
scaling, clipping, optimizer, LR scheduler) and the Accumulator owns the
window's weights, as with the sync objects of :mod:`gradguard.distributed`:

* ``backward(loss)``: ``engine.backward(loss, scale_wrt_gas=False)`` with the
  engine's accumulation boundary held off (``set_gradient_accumulation_boundary``),
  so the engine adds the exactly weighted micro-batch gradients and never
  divides them;
* ``finish_window``: at the window's end, full or partial, the engine's own
  boundary reduction: ``engine.allreduce_gradients()`` at stages 0 and 1, and
  the partition finaliser (``finalize_gradient_accumulation_boundary``) at
  stages 2 and 3, which reduce-scatter during every backward anyway;
* ``scale_grads``: the one end-of-window multiply by ``ref * steps * world /
  total``. The reduced gradient lives in ``.grad`` at stage 0, in the optimizer's
  partition at stages 1-3: each rank multiplies only its own part (no
  communication; the multiply is linear, so the whole gradient is scaled);
* ``step``: ``engine.step()``, once per window: the engine's clipping
  (``gradient_clipping``), loss unscaling and LR scheduler see the exact
  full-window gradient, as they would on one large batch;
* ``reduce_sum``: the window's global item count, one all-reduce per window
  over the engine's data-parallel group.

What is refused: a pipeline-parallel engine (it runs micro-batches inside
``train_batch``), ``managed_gradient_accumulation=false``, an engine whose
``gradient_accumulation_steps`` differs from ``steps`` (DeepSpeed sizes its
batches and CPU-offload buffers by it), and the Accumulator options the
engine owns instead (``max_grad_norm``, ``scaler``, ``scheduler``). Under
ZeRO (stages 1-3) the in-flight gradients sit inside the engine, so
``acc.state_dict()`` is refused in the middle of a window: save at a window
boundary, beside ``engine.save_checkpoint``.

deepspeed is imported only when an engine is passed; this module reads the
one the user already imported from ``sys.modules``.
"""

from __future__ import annotations

import functools
import sys
from contextlib import nullcontext
from typing import ContextManager, List, Optional

import torch

from ._errors import GradguardError
from .distributed import LocalSync, weighted, zeroed_backward

__all__ = ["DeepSpeedSync", "is_deepspeed_engine"]


def is_deepspeed_engine(obj) -> bool:
    """Whether ``obj`` is a ``deepspeed.DeepSpeedEngine`` (False when deepspeed was never imported).

    >>> is_deepspeed_engine(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))
    False
    """
    engine_module = sys.modules.get("deepspeed.runtime.engine")
    return engine_module is not None and isinstance(obj, engine_module.DeepSpeedEngine)


class _EngineOptimizer:
    """What the Accumulator sees as its optimizer: the engine's module parameters, stepped by ``engine.step()``.

    The engine's own optimizer holds flat fp32 partitions under ZeRO, not the
    model's parameters; the Accumulator needs the latter (their devices,
    ``.grad`` at stage 0) and a ``zero_grad`` that also empties the engine's
    partitioned accumulators when a window is dropped.
    """

    def __init__(self, sync: "DeepSpeedSync") -> None:
        self._sync = sync
        self.param_groups = [{"params": [p for p in sync.engine.module.parameters() if p.requires_grad]}]

    def step(self) -> None:
        self._sync.engine.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._sync.clear()

    def __repr__(self) -> str:
        return f"_EngineOptimizer({type(self._sync.engine.optimizer).__name__})"


class DeepSpeedSync(LocalSync):
    """Drives a ``deepspeed.DeepSpeedEngine`` at ZeRO stage 0, 1, 2 or 3.

    Built by ``gg.Accumulator(engine, steps)``; not normally constructed by hand.

    Args:
        engine: the engine ``deepspeed.initialize`` returned, built with
            ``gradient_accumulation_steps`` equal to the Accumulator's ``steps``.

    Raises:
        GradguardError: a pipeline-parallel engine, an engine without an
            optimizer, or one with ``managed_gradient_accumulation=false``.
    """

    grads_averaged = True  # every stage divides the reduced gradient by the data-parallel size

    def __init__(self, engine) -> None:
        pipe = sys.modules.get("deepspeed.runtime.pipe.engine")
        if pipe is not None and isinstance(engine, pipe.PipelineEngine):
            raise GradguardError(
                f"the engine is a {type(engine).__name__} (pipeline parallelism): it runs its micro-batches itself inside "
                "train_batch(), so no per-micro-batch weight can reach it. gradguard.Accumulator(engine, steps) drives a "
                "plain DeepSpeedEngine (ZeRO stages 0-3, data parallel); weight the loss by count / mean count per window "
                "inside the pipeline's loss_fn instead"
            )
        if engine.optimizer is None or type(engine.optimizer).__name__ == "DummyOptim":
            raise GradguardError(
                "the engine has no optimizer (deepspeed.initialize got none): pass optimizer=... or an 'optimizer' "
                "section in the DeepSpeed config, the Accumulator steps it through engine.step()"
            )
        managed = getattr(engine, "managed_gradient_accumulation", None)  # the switch is new in deepspeed 0.19
        if managed is not None and not managed():
            raise GradguardError(
                "the engine runs with managed_gradient_accumulation=false (every engine.step() is a boundary): build it "
                "with the default (true); gradguard.Accumulator(engine, steps) sets the boundary itself"
            )
        self.engine = engine
        self.stage = int(engine.zero_optimization_stage())
        self.world_size = int(engine.dp_world_size)
        self.group = engine.data_parallel_group
        # Stages 0 and 1 reduce only at the boundary (held off until the window's end);
        # stages 2 and 3 reduce-scatter during every backward, whatever the boundary.
        self.defers_sync = self.stage < 2 and self.world_size > 1
        # ZeRO-2/3 reduce inside backward hooks that every rank must join; ZeRO-3 also
        # gathers parameters for each forward and releases them in the backward.
        self.needs_empty_backward = self.world_size > 1 or self.stage == 3
        # Only stage 0 keeps the window's gradients in .grad (each rank's own until the end).
        self.grads_in_params = self.stage == 0
        # autograd writes .grad (and fires post-accumulate hooks) only at stage 0; ZeRO 1-3 move it into partitions
        self.accumulates_into_params = self.stage == 0
        # The Accumulator's self-check of .grad (see _self_check.py): at stages 0 and 1 each rank's window sum
        # stays in .grad, written by autograd's accumulation alone, until the boundary reduction at the window's
        # end; a zero_grad() left in the loop (the engine's, its optimizer's or the module's) empties it there.
        # Stage 2 moves every pass into the engine's partitions, out of reach of each of them (measured exact).
        self.window_in_grad = self.stage <= 1
        self.checks_across_ranks = self.stage <= 1
        # Stage 3 keeps the window in partitions that the ZeRO optimizer's own zero_grad() empties (the engine's
        # and the module's do not): a call of it in a window is noted here and the window refused at its end.
        self._own = False  # inside the Accumulator's own step or clearing
        self._stray: Optional[str] = None
        if self.stage == 3:
            self._watch_zero_grad(engine.optimizer)
        self.optimizer = _EngineOptimizer(self)
        self._window_reduced = False
        # Whether the engine ran a backward pass in this window: one process at stages 0-2 runs none
        # for a micro-batch of 0 items, and the engine's boundary reduction of a window without any
        # fails inside DeepSpeed (nothing was bucketed).
        self._window_backward = False

    def check_options(self, steps: int, *, scheduler=None, scaler=None, max_grad_norm=None, accelerator=None) -> None:
        """Refuse what the engine owns itself, and an accumulation length that disagrees with the engine's."""
        owned = [(name, value, advice) for name, value, advice in (
            ("max_grad_norm", max_grad_norm, "the engine clips: set 'gradient_clipping' in the DeepSpeed config (it "
                                             "clips the exact window gradient)"),
            ("scaler", scaler, "the engine scales the loss: set 'fp16' or 'bf16' in the DeepSpeed config"),
            ("scheduler", scheduler, "the engine steps its own LR scheduler once per window: pass it to "
                                     "deepspeed.initialize(lr_scheduler=...) or a 'scheduler' section of the config"),
            ("accelerator", accelerator, "drop accelerator=, the Accumulator drives the engine directly"),
        ) if value is not None]
        if owned:
            name, value, advice = owned[0]
            raise GradguardError(f"{name}={value!r} was passed next to a DeepSpeed engine: {advice}")
        engine_steps = self.engine.gradient_accumulation_steps()
        if engine_steps != steps:
            raise GradguardError(
                f"the engine was built with gradient_accumulation_steps={engine_steps} but the Accumulator has steps={steps}: "
                f"set \"gradient_accumulation_steps\": {steps} in the DeepSpeed config (DeepSpeed sizes its batch and "
                "offload buffers by it), or pass steps=" + str(engine_steps)
            )

    def __repr__(self) -> str:
        return f"DeepSpeedSync(stage={self.stage}, world_size={self.world_size})"

    # ------------------------------------------------------------ micro-batch
    def microbatch(self, ends_window: bool) -> ContextManager:
        return nullcontext()  # the boundary is set per backward and at the window's end

    def backward(self, loss: torch.Tensor, weight: float = 1.0) -> None:
        # The boundary stays off: the window's end (full or partial, only the
        # Accumulator knows which) runs the boundary reduction in finish_window.
        self.engine.set_gradient_accumulation_boundary(False)
        self._window_backward = True
        self.engine.backward(weighted(loss, weight), scale_wrt_gas=False)
        self._window_reduced = False

    def empty_backward(self, loss: torch.Tensor, params: List[torch.Tensor]) -> None:
        if zeroed_backward(loss, backward=self.backward) == 0:
            raise GradguardError(
                "a micro-batch with count=0 must still run the engine's backward (its reduction hooks run on every rank), "
                "but its loss does not depend on the model: compute the loss from the engine's output even for an "
                "empty batch (e.g. cross-entropy over targets that are all ignore_index)"
            )

    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t

    # ------------------------------------------------------------ window end
    def finish_window(self, params: List[torch.Tensor], last_synced: bool) -> None:
        if self._window_reduced:  # a retried end (the step raised): reduced already
            return
        if not self._window_backward:
            # Every micro-batch had 0 items on this (only) rank: nothing to reduce, and the window
            # ends dropped (0 items in total), which clears the engine's state.
            return
        self.engine.set_gradient_accumulation_boundary(True)
        if self.engine.zero_optimization_partition_gradients():
            # Stages 2 and 3 reduced every backward into their partitions: only the
            # boundary bookkeeping is left (DeepSpeed's caller-owned-boundary path).
            self.engine.optimizer.finalize_gradient_accumulation_boundary()
        else:
            self.engine.allreduce_gradients()
        self._window_reduced = True

    def scale_grads(self, params: List[torch.Tensor], factor: float) -> None:
        """Multiply the window's reduced gradient by ``factor``, each rank its own part, no communication."""
        if self.stage == 0:
            super().scale_grads(params, factor)
        elif self.stage == 3:
            from deepspeed.utils import safe_get_local_grad, safe_set_local_grad

            for p in params:
                local = safe_get_local_grad(p)
                if local is not None:
                    safe_set_local_grad(p, local * factor)
        else:
            # ZeRO-1/2: each parameter's fragment of this rank's reduced partition (the
            # mapping deepspeed.utils.safe_get_full_grad reads; None where the
            # parameter lies in another rank's partition).
            fragments = [p._hp_mapping.get_lp_grad_fragment(p._index_in_param_group)
                         for p in params if getattr(p, "_hp_mapping", None) is not None]
            if fragments:
                torch._foreach_mul_(fragments, factor)

    def step(self, optimizer, scaler=None) -> None:
        self._own = True
        try:
            self.engine.step()  # clipping, unscaling, optimizer, LR scheduler: once per window
        finally:
            self._own = False
        self.engine.set_gradient_accumulation_boundary(False)

    def clear(self) -> None:
        """Drop the window's gradients without stepping (also called after each step, when there is nothing left)."""
        engine = self.engine
        self._own = True
        try:
            if self.stage == 0:
                engine.zero_grad()
            else:
                engine.optimizer.zero_grad(set_to_none=True)
                # The reduced partition a dropped window leaves behind (engine.step() clears it itself).
                averaged = getattr(engine.optimizer, "averaged_gradients", None)
                if isinstance(averaged, dict):
                    for key in averaged:
                        averaged[key] = None
        finally:
            self._own = False
        engine.set_gradient_accumulation_boundary(False)
        self._window_reduced = False
        self._window_backward = False
        self._stray = None

    def touched(self) -> Optional[str]:
        return self._stray

    def _watch_zero_grad(self, zero_optimizer) -> None:
        """Note a call of the ZeRO optimizer's ``zero_grad()`` in a window that is not the Accumulator's own."""
        original = zero_optimizer.zero_grad
        sync = self

        @functools.wraps(original)
        def zero_grad(*args, **kwargs):
            if sync._window_backward and not sync._own and sync._stray is None:
                from ._self_check import caller_site

                site = caller_site()
                sync._stray = (
                    f"the in-flight gradients of the window were emptied by {type(zero_optimizer).__name__}.zero_grad()"
                    f"{' at ' + site if site else ''} after the window's first backward(): under ZeRO stage 3 the "
                    "engine's partitions hold the window's sum, so stepping would apply only the micro-batches after "
                    "that call. Nothing was applied"
                    + (f" on any of the {sync.world_size} ranks" if sync.world_size > 1 else "")
                    + " and the window was discarded (skipped_windows + 1). The Accumulator clears the gradients "
                    "itself after each step: remove the zero_grad() from the loop"
                )
            return original(*args, **kwargs)

        zero_optimizer.zero_grad = zero_grad

    def settle(self, params: List[torch.Tensor]) -> None:
        if not self.grads_in_params:
            raise GradguardError(
                f"acc.state_dict() in the middle of a window under ZeRO stage {self.stage}: the in-flight "
                "gradients are partitioned inside the DeepSpeed engine, which cannot save them. Save at a window "
                "boundary (when acc.micro_step == 0, beside engine.save_checkpoint), or use ZeRO stage 0"
            )
