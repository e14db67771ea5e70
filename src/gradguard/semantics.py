"""The seed semantics, made checkable: :func:`grads_per_step` and :func:`check_equivalence`."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, List, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from ._errors import GradguardError


def grads_per_step(x: torch.Tensor, steps: int, fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None, clear: bool = True) -> list:
    """Run ``steps`` independent backward passes of ``fn(x)`` and record ``x.grad`` after each.

    Each call of ``fn(x)`` builds a new graph, so these are separate backward
    passes. ``x.grad`` starts empty. With ``clear=True`` it is set to None before
    each pass and every entry is the same; with ``clear=False`` the passes add up.

    Args:
        x: a leaf tensor with ``requires_grad=True``.
        steps: number of backward passes (>= 0).
        fn: scalar function of ``x``; default ``(x * 2).sum()``.
        clear: set ``x.grad = None`` before each pass.

    Returns:
        ``[x.grad.tolist() after pass 1, after pass 2, ...]``.

    Raises:
        GradguardError: ``x`` is not a leaf requiring grad, ``steps`` < 0, or ``fn(x)`` is not a scalar.

    >>> import torch
    >>> x = torch.ones(3, requires_grad=True)
    >>> grads_per_step(x, 2, clear=False)
    [[2.0, 2.0, 2.0], [4.0, 4.0, 4.0]]
    >>> grads_per_step(x, 2)
    [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
    """
    if not isinstance(x, torch.Tensor) or not x.requires_grad or not x.is_leaf:
        raise GradguardError("x must be a leaf tensor with requires_grad=True, e.g. torch.ones(3, requires_grad=True)")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise GradguardError(f"steps must be an int >= 0, got {steps!r}")
    fn = fn if fn is not None else (lambda t: (t * 2).sum())
    x.grad = None  # start from an empty accumulator, so that a rerun shows the same thing
    out = []
    for _ in range(steps):
        if clear:
            x.grad = None
        y = fn(x)
        if not isinstance(y, torch.Tensor) or y.numel() != 1:
            raise GradguardError(f"fn(x) must return a scalar tensor, got {type(y).__name__} of shape {tuple(getattr(y, 'shape', ()))}")
        y.backward()
        out.append(x.grad.tolist())
    return out


# ------------------------------------------------------------- equivalence
Batch = Union[torch.Tensor, Sequence[torch.Tensor], Mapping[str, torch.Tensor]]

# Modules whose training-mode forward couples the examples of a batch (batch
# statistics) or draws random numbers per call: both make a split batch compute a
# different function than the full one.
_BATCH_STAT_TYPES = (nn.modules.batchnorm._BatchNorm,)
_DROPOUT_TYPES = (nn.modules.dropout._DropoutNd,)


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
    batch: Batch,
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
        loss_fn: ``loss_fn(model, micro_batch) -> scalar loss`` (mean over its
            items for ``reduction="mean"``, their sum for ``"sum"``).
        batch: a tensor, or a tuple/list/dict of tensors sharing dimension 0.
        splits: number of micro-batches (near-equal sizes) or the list of sizes.
        count_fn: items in a micro-batch (e.g. non-ignored tokens); default: its size along dim 0.
        reduction: ``"mean"`` or ``"sum"``, what ``loss_fn`` returns.
        dtype: floating dtype of the comparison (``None``: keep the model's).
        rtol: relative tolerance for ``equivalent``.

    Returns:
        An :class:`EquivalenceReport`; ``.causes`` names what breaks equivalence:
        batch-statistics layers in training mode, dropout, or a loss that is not
        an additive mean over the counted items.

    >>> import torch
    >>> from torch import nn
    >>> model = nn.Linear(4, 1)
    >>> x, y = torch.randn(10, 4), torch.randn(10, 1)
    >>> mse = lambda m, b: nn.functional.mse_loss(m(b[0]), b[1])
    >>> check_equivalence(model, mse, (x, y), splits=[3, 7]).equivalent
    True
    """
    from .accumulate import Accumulator

    size = _batch_size(batch)
    sizes = _split_sizes(splits, size)
    count_fn = count_fn or _batch_size
    work = copy.deepcopy(model)
    if dtype is not None:
        work = work.to(dtype)
        batch = _map_batch(batch, lambda t: t.to(dtype) if t.is_floating_point() else t)
    params = [(n, p) for n, p in work.named_parameters() if p.requires_grad]
    if not params:
        raise GradguardError("the model has no parameter with requires_grad=True: there is no gradient to compare")
    micro_batches = [_slice_batch(batch, start, start + n) for start, n in zip(_offsets(sizes), sizes)]

    # Same random numbers for every scheme, so dropout differences come from the split alone.
    with torch.random.fork_rng(devices=[]):
        seed = torch.initial_seed()
        torch.manual_seed(seed)
        _clear(params)
        full_loss = loss_fn(work, batch)
        full_loss.backward()
        full_loss = full_loss.detach()
        full = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for _, p in params]

        torch.manual_seed(seed)
        _clear(params)
        capture = _CaptureGrads([p for _, p in params])
        acc = Accumulator(capture, steps=len(sizes))
        losses, counts = [], []
        for mb in micro_batches:
            loss = loss_fn(work, mb)
            count = count_fn(mb)
            losses.append(loss.detach())
            counts.append(float(count))
            acc.backward(loss, count=count, reduction=reduction)
            acc.step()
        accumulated = capture.grads

        torch.manual_seed(seed)
        _clear(params)
        for mb in micro_batches:
            (loss_fn(work, mb) / len(sizes)).backward()
        naive = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for _, p in params]
        _clear(params)

    names = [n for n, _ in params]
    max_abs, max_rel, worst = _compare(accumulated, full, names)
    _, naive_rel, _ = _compare(naive, full, names)
    total = sum(counts)
    if reduction == "mean":
        weighted = sum(float(l) * c for l, c in zip(losses, counts)) / total if total else float("nan")
        ref_loss = float(full_loss)
    else:
        weighted, ref_loss = sum(float(l) for l in losses), float(full_loss)
    loss_gap = abs(weighted - ref_loss) / max(abs(ref_loss), 1e-300)

    causes = []
    if max_rel > rtol:
        causes = _explain(work, loss_gap, rtol)
    return EquivalenceReport(max_abs, max_rel, worst, naive_rel, loss_gap, sizes, rtol, causes)


class _CaptureGrads(torch.optim.Optimizer):
    """An optimizer whose step records the gradients it was given (and moves nothing)."""

    def __init__(self, params):
        super().__init__(params, {})
        self.grads: List[torch.Tensor] = []

    @torch.no_grad()
    def step(self, closure=None):
        self.grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                      for g in self.param_groups for p in g["params"]]


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


def _explain(model: nn.Module, loss_gap: float, rtol: float) -> List[str]:
    causes = []
    bn = [n or type(m).__name__ for n, m in model.named_modules() if isinstance(m, _BATCH_STAT_TYPES) and m.training]
    if bn:
        causes.append(
            f"batch-statistics layers in training mode ({', '.join(bn[:4])}{', ...' if len(bn) > 4 else ''}): "
            "BatchNorm normalises each micro-batch with its own statistics, so a split batch computes a different "
            "function (rule GG109); use LayerNorm/GroupNorm, or accept the difference"
        )
    drop = [n or type(m).__name__ for n, m in model.named_modules() if isinstance(m, _DROPOUT_TYPES) and m.training and m.p > 0]
    if drop:
        causes.append(
            f"dropout in training mode ({', '.join(drop[:4])}{', ...' if len(drop) > 4 else ''}): "
            "masks are drawn per forward call, so micro-batches see different masks than the full batch; "
            "compare with model.eval() or dropout p=0"
        )
    if not causes and loss_gap > rtol:
        causes.append(
            "the loss is not an additive mean over the counted items: the count-weighted mean of the micro-batch "
            f"losses differs from the full-batch loss by {loss_gap:.3g} (relative). Check count_fn (e.g. count "
            "non-ignored tokens, not sequences) and that the loss has no batch-level term (contrastive losses, "
            "normalisation by a batch statistic)"
        )
    if not causes:
        causes.append("unexplained: the forward pass depends on the batch composition in some other way")
    return causes


def _batch_size(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0]
    tensors = list(batch.values()) if isinstance(batch, Mapping) else list(batch)
    if not tensors:
        raise GradguardError("batch is empty: pass a tensor, or a tuple/list/dict of tensors sharing dimension 0")
    return tensors[0].shape[0]


def _map_batch(batch: Any, fn):
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        return {k: fn(v) for k, v in batch.items()}
    return type(batch)(fn(t) for t in batch)


def _slice_batch(batch: Any, start: int, stop: int):
    return _map_batch(batch, lambda t: t[start:stop])


def _split_sizes(splits: Union[int, Sequence[int]], size: int) -> List[int]:
    if isinstance(splits, int) and not isinstance(splits, bool):
        if not 1 <= splits <= size:
            raise GradguardError(f"splits={splits} micro-batches does not fit a batch of {size}: use 1..{size}")
        base, extra = divmod(size, splits)
        return [base + (i < extra) for i in range(splits)]
    sizes = list(splits)
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes) or sum(sizes) != size:
        raise GradguardError(f"splits={sizes!r} must be positive ints summing to the batch size {size}")
    return sizes


def _offsets(sizes: List[int]) -> List[int]:
    out, at = [], 0
    for s in sizes:
        out.append(at)
        at += s
    return out
