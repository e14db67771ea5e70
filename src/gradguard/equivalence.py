"""Is accumulation exact for *your* model and loss? :func:`check_equivalence`.

It runs the same batch three ways on a float64 copy of the model (the full
batch; a real :class:`gradguard.Accumulator` over micro-batches weighted by
their item counts; the naive ``loss / k``) and names what breaks equivalence.
"""

from __future__ import annotations

import copy
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Union

import torch
from torch import nn

from . import _batch
from ._errors import GradguardError

__all__ = ["EquivalenceReport", "check_equivalence"]

# Modules whose training-mode forward couples the examples of a batch (batch
# statistics) or draws random numbers per call: both make a split batch compute a
# different function than the full one.
_BATCH_STAT_TYPES = (nn.modules.batchnorm._BatchNorm,)
_DROPOUT_TYPES = (nn.modules.dropout._DropoutNd,)

_LOSS_FN_FORM = "loss_fn(model, micro_batch) -> scalar loss, e.g. lambda m, b: F.mse_loss(m(b[0]), b[1])"


@dataclass
class EquivalenceReport:
    """What :func:`check_equivalence` found.

    Attributes:
        max_abs_diff: largest absolute difference between the accumulated and the full-batch gradient.
        max_rel_diff: the same, relative to the largest full-batch gradient entry of that parameter.
        worst_param: the parameter where ``max_rel_diff`` occurs.
        naive_max_rel_diff: the same measure for the naive ``loss / len(splits)`` scheme.
        loss_gap: |full-batch loss - count-weighted mean of the micro-batch losses|, relative.
        causes: what breaks equivalence (empty when the gradients agree).
        equivalent: ``max_rel_diff <= rtol``.
    """

    max_abs_diff: float
    max_rel_diff: float
    worst_param: Optional[str]
    naive_max_rel_diff: float
    loss_gap: float
    splits: List[int]
    rtol: float
    causes: List[str] = field(default_factory=list)

    @property
    def equivalent(self) -> bool:
        return self.max_rel_diff <= self.rtol

    def __str__(self) -> str:
        verdict = "equivalent" if self.equivalent else "NOT equivalent"
        lines = [
            f"accumulated over micro-batches {self.splits} vs full batch: {verdict}",
            f"  max abs diff {self.max_abs_diff:.3g}, max rel diff {self.max_rel_diff:.3g}"
            + (f" (at {self.worst_param})" if self.worst_param else ""),
            f"  naive loss/{len(self.splits)} scheme: max rel diff {self.naive_max_rel_diff:.3g}",
        ]
        lines += [f"  cause: {c}" for c in self.causes]
        return "\n".join(lines)


def check_equivalence(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    batch: Any,
    *,
    splits: Union[int, Sequence[int]],
    count_fn: Optional[Callable[[Any], Union[int, torch.Tensor]]] = None,
    reduction: str = "mean",
    dtype: Optional[torch.dtype] = torch.float64,
    rtol: float = 1e-9,
) -> EquivalenceReport:
    """Compare the accumulated gradient of your model and loss with the full-batch gradient.

    The model is deep-copied (its parameters, ``.grad`` and running statistics
    are not touched) and, by default, cast to float64 so that rounding does not
    hide or fake a difference. The accumulated gradient is computed by a real
    :class:`gradguard.Accumulator` weighted by ``count_fn``.

    Args:
        model: your model, in the mode (train/eval) you train it in.
        loss_fn: ``loss_fn(model, micro_batch) -> scalar loss``: it runs the model
            on the (micro-)batch itself (mean over its items for
            ``reduction="mean"``, their sum for ``"sum"``).
        batch: a tensor, or a tuple/list/dict of tensors sharing dimension 0.
        splits: number of micro-batches (near-equal sizes) or the list of sizes.
        count_fn: items in a micro-batch (e.g. non-ignored tokens); default: its size along dim 0.
        reduction: ``"mean"`` or ``"sum"``, what ``loss_fn`` returns.
        dtype: floating dtype of the comparison (``None``: keep the model's).
        rtol: relative tolerance for ``equivalent``.

    Returns:
        An :class:`EquivalenceReport`; ``.causes`` names what breaks equivalence:
        batch-statistics layers in training mode, a missing ``count_fn`` (the
        loss averages over something other than rows), dropout, or a loss that
        is not an additive mean over the counted items.

    Raises:
        GradguardError: bad ``splits``, a model without trainable parameters, or a
            ``loss_fn`` that cannot be called as ``loss_fn(model, micro_batch)`` or
            does not return a scalar tensor.

    >>> import torch
    >>> from torch import nn
    >>> model = nn.Linear(4, 1)
    >>> x, y = torch.randn(10, 4), torch.randn(10, 1)
    >>> mse = lambda m, b: nn.functional.mse_loss(m(b[0]), b[1])
    >>> check_equivalence(model, mse, (x, y), splits=[3, 7]).equivalent
    True
    """
    size = _batch.length(batch)
    sizes = _batch.split_sizes(splits, size)
    _check_signature(loss_fn, model, batch)
    work = copy.deepcopy(model)
    if dtype is not None:
        work = work.to(dtype)
        batch = _batch.map_tensors(batch, lambda t: t.to(dtype) if t.is_floating_point() else t)
    params = [(n, p) for n, p in work.named_parameters() if p.requires_grad]
    if not params:
        raise GradguardError("the model has no parameter with requires_grad=True: there is no gradient to compare")
    micro_batches = _batch.split(batch, sizes)
    counter = count_fn or _batch.length

    run = _three_ways(work, params, loss_fn, batch, micro_batches, counter, reduction)
    names = [n for n, _ in params]
    max_abs, max_rel, worst = _compare(run.accumulated, run.full, names)
    _, naive_rel, _ = _compare(run.naive, run.full, names)
    loss_gap = _loss_gap(run, reduction)

    causes = []
    if max_rel > rtol:
        dropout_alone = None
        if _active_dropout(work):
            # Would the split be exact without dropout? Then dropout is the cause; if not, it is not
            # (the same seed is used for every scheme, so the masks alone seldom explain a gap).
            quiet = copy.deepcopy(work)
            for m in quiet.modules():
                if isinstance(m, _DROPOUT_TYPES):
                    m.eval()
            quiet_params = [(n, p) for n, p in quiet.named_parameters() if p.requires_grad]
            again = _three_ways(quiet, quiet_params, loss_fn, batch, micro_batches, counter, reduction)
            dropout_alone = _compare(again.accumulated, again.full, names)[1] <= rtol
            loss_gap = _loss_gap(again, reduction)
        causes = _explain(work, loss_gap, rtol, count_fn is None, run.counts, dropout_alone)
    return EquivalenceReport(max_abs, max_rel, worst, naive_rel, loss_gap, sizes, rtol, causes)


@dataclass
class _Run:
    full: List[torch.Tensor]
    accumulated: List[torch.Tensor]
    naive: List[torch.Tensor]
    full_loss: float
    losses: List[float]
    counts: List[float]


def _three_ways(work, params, loss_fn, batch, micro_batches, count_fn, reduction) -> _Run:
    from .accumulate import Accumulator

    # Same random numbers for every scheme, so dropout differences come from the split alone.
    with torch.random.fork_rng(devices=[]):
        seed = torch.initial_seed()
        torch.manual_seed(seed)
        _clear(params)
        full_loss = _call(loss_fn, work, batch)
        full_loss.backward()
        full = _grads(params)

        torch.manual_seed(seed)
        _clear(params)
        capture = _CaptureGrads([p for _, p in params])
        acc = Accumulator(capture, steps=len(micro_batches))
        losses, counts = [], []
        for mb in micro_batches:
            loss = _call(loss_fn, work, mb)
            count = count_fn(mb)
            losses.append(float(loss.detach()))
            counts.append(float(count))
            acc.backward(loss, count=count, reduction=reduction)
            acc.step()
        accumulated = capture.grads

        torch.manual_seed(seed)
        _clear(params)
        for mb in micro_batches:
            (_call(loss_fn, work, mb) / len(micro_batches)).backward()
        naive = _grads(params)
        _clear(params)
    return _Run(full, accumulated, naive, float(full_loss.detach()), losses, counts)


def _loss_gap(run: _Run, reduction: str) -> float:
    total = sum(run.counts)
    if reduction == "mean":
        weighted = sum(l * c for l, c in zip(run.losses, run.counts)) / total if total else float("nan")
    else:
        weighted = sum(run.losses)
    return abs(weighted - run.full_loss) / max(abs(run.full_loss), 1e-300)


def _check_signature(loss_fn, model, batch) -> None:
    if not callable(loss_fn):
        raise GradguardError(f"loss_fn must be callable as {_LOSS_FN_FORM}; got {type(loss_fn).__name__}")
    try:
        inspect.signature(loss_fn).bind(model, batch)
    except TypeError:
        raise GradguardError(
            f"loss_fn{inspect.signature(loss_fn)} cannot be called with (model, micro_batch): it must be {_LOSS_FN_FORM}"
        ) from None
    except ValueError:  # no signature to read (some builtins): the call below will tell
        pass


def _call(loss_fn, model, micro_batch) -> torch.Tensor:
    """``loss_fn(model, micro_batch)``, with one clear error when it is not that kind of function."""
    try:
        loss = loss_fn(model, micro_batch)
    except (TypeError, AttributeError) as exc:
        raise GradguardError(
            f"calling loss_fn(model, micro_batch) failed ({type(exc).__name__}: {exc}): loss_fn must be {_LOSS_FN_FORM} "
            "(it gets the model and a slice of the batch, not outputs and targets)"
        ) from exc
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
        what = type(loss).__name__ if not isinstance(loss, torch.Tensor) else f"a tensor of shape {tuple(loss.shape)}" + (
            "" if loss.requires_grad else " without grad")
        raise GradguardError(f"loss_fn returned {what}: it must be {_LOSS_FN_FORM}, returning a scalar loss with grad")
    return loss.reshape(())


class _CaptureGrads(torch.optim.Optimizer):
    """An optimizer whose step records the gradients it was given (and moves nothing)."""

    def __init__(self, params):
        super().__init__(params, {})
        self.grads: List[torch.Tensor] = []

    @torch.no_grad()
    def step(self, closure=None):
        self.grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                      for g in self.param_groups for p in g["params"]]


def _grads(params) -> List[torch.Tensor]:
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for _, p in params]


def _clear(params) -> None:
    for _, p in params:
        p.grad = None


def _compare(got: List[torch.Tensor], want: List[torch.Tensor], names: List[str]):
    max_abs, max_rel, worst = 0.0, 0.0, None
    for name, g, w in zip(names, got, want):
        diff = (g - w).abs().max().item() if g.numel() else 0.0
        scale = w.abs().max().item() if w.numel() else 0.0
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
        max_abs = max(max_abs, diff)
        if rel > max_rel:
            max_rel, worst = rel, name
    return max_abs, max_rel, worst


def _names(model: nn.Module, types, active) -> List[str]:
    return [n or type(m).__name__ for n, m in model.named_modules() if isinstance(m, types) and active(m)]


def _active_dropout(model: nn.Module) -> List[str]:
    return _names(model, _DROPOUT_TYPES, lambda m: m.training and m.p > 0)


def _listed(names: List[str]) -> str:
    return ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")


def _explain(model: nn.Module, loss_gap: float, rtol: float, no_count_fn: bool, counts: List[float],
             dropout_alone: Optional[bool]) -> List[str]:
    causes = []
    bn = _names(model, _BATCH_STAT_TYPES, lambda m: m.training)
    if bn:
        causes.append(
            f"batch-statistics layers in training mode ({_listed(bn)}): "
            "BatchNorm normalises each micro-batch with its own statistics, so a split batch computes a different "
            "function (rule GG109); use LayerNorm/GroupNorm, or accept the difference"
        )
    drop = _active_dropout(model)
    counts_gap = not bn and dropout_alone is not True and loss_gap > rtol
    if counts_gap and no_count_fn:
        sizes = ", ".join(f"{c:g}" for c in counts)
        causes.append(
            f"no count_fn: each micro-batch was weighted by its rows ({sizes}), but the loss does not average over "
            "rows (the count-weighted mean of the micro-batch losses differs from the full-batch loss by "
            f"{loss_gap:.3g}, relative). If it averages over tokens or non-ignored targets, pass count_fn, e.g. "
            "count_fn=lambda mb: (mb[1] != -100).sum()"
        )
    if drop and dropout_alone is not False:
        causes.append(
            f"dropout in training mode ({_listed(drop)}): "
            "masks are drawn per forward call, so micro-batches see different masks than the full batch; "
            "compare with model.eval() or dropout p=0"
        )
    if counts_gap and not no_count_fn:
        causes.append(
            "the loss is not an additive mean over the counted items: the count-weighted mean of the micro-batch "
            f"losses differs from the full-batch loss by {loss_gap:.3g} (relative). Check count_fn (e.g. count "
            "non-ignored tokens, not sequences) and that the loss has no batch-level term (contrastive losses, "
            "normalisation by a batch statistic)"
        )
    if not causes:
        causes.append("unexplained: the forward pass depends on the batch composition in some other way")
    return causes
