"""The Accumulator's options and counts, checked before anything changes.

* :func:`check_options`: the constructor's arguments (optimizer, steps, scheduler, scaler,
  ``max_grad_norm``, ``nonfinite``), each refused with a :class:`GradguardError` naming the value.
* :func:`count_value`: one micro-batch's ``count``, validated (the common ``int`` is checked
  inline in ``Accumulator.backward``, the hot path; everything else comes here).
"""

from __future__ import annotations

import inspect
import math
import sys
from numbers import Integral, Real
from typing import Optional, Tuple, Union

import torch

from ._errors import GradguardError

NONFINITE_MODES = ("raise", "skip", "raise_early")
LARGEST_FLOAT = int(sys.float_info.max)  # an int count above it cannot be a weight

Count = Union[int, float, torch.Tensor, None]


def check_options(optimizer, steps, *, scheduler, scaler, max_grad_norm, nonfinite, engine_sync, accelerator) -> None:
    """Refuse what no Accumulator can work with (see ``Accumulator``'s Raises); ``engine_sync``: a DeepSpeed engine's driver."""
    if not (hasattr(optimizer, "param_groups") and callable(getattr(optimizer, "step", None))):
        raise GradguardError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}: "
            "pass the optimizer whose parameters accumulate, e.g. Accumulator(torch.optim.AdamW(model.parameters()), steps=4)"
        )
    if needs_closure(optimizer):
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
    if nonfinite not in NONFINITE_MODES:
        raise GradguardError(f"nonfinite must be one of {NONFINITE_MODES}, got {nonfinite!r}")


def needs_closure(optimizer) -> bool:
    """True when ``optimizer.step`` requires a closure argument (LBFGS)."""
    try:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return closure is not None and closure.default is inspect.Parameter.empty


def count_value(count: Count, reduction: str) -> Tuple[float, Optional[torch.Tensor]]:
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
        if count.is_meta:
            raise GradguardError(
                f"count is a meta tensor ({count!r}), which holds no value: pass the real number of items "
                "(an int, or a tensor on the loss's device)"
            )
        if reduction == "sum":
            return 0, count.detach()
        value = count.item()  # the one read a tensor count of a mean costs (0 must be seen to keep 0/0 out)
    elif isinstance(count, Integral) and not isinstance(count, bool):
        value = int(count)  # numpy integers too
    elif isinstance(count, float) or (isinstance(count, Real) and type(count).__module__ == "numpy"):
        value = float(count)
    else:
        raise GradguardError(
            f"count must be an int, a float or a 0-dim tensor (number of items), got {count!r}"
            + (": pass int(count) or float(count)" if isinstance(count, Real) and not isinstance(count, bool) else "")
        )
    try:
        ok = math.isfinite(value) and value >= 0
    except OverflowError:  # an int beyond float range
        ok = False
    if not ok:
        raise GradguardError(f"count must be a finite number >= 0 (items in this micro-batch), got {value!r}")
    return value, None
