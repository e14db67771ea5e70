"""Automatic micro-batching: back-propagate a batch in pieces, halving on out-of-memory.

:func:`accumulate_batch` adds to ``.grad`` exactly what one backward of the
whole batch's mean loss would add, but runs the batch in micro-batches of at
most ``micro_batch_size`` items. When a micro-batch raises
``torch.OutOfMemoryError`` (CUDA, and other accelerators) or the CPU
allocator's ``RuntimeError: DefaultCPUAllocator: can't allocate memory``, the
partial gradients of this batch are thrown away, the size is halved and the
whole batch is run again, so nothing is counted twice and the result stays exact.

Which tensors: every tensor requiring grad that the loss reaches (the model's
parameters, and any other trainable leaf such as a learned prompt added to
the input), found from each micro-batch's autograd graph. Their gradients
that were there before are set aside (the ``.grad`` references are taken off,
no copy) while the batch runs into fresh ``.grad`` tensors, and put back when
it is done. Given an
:class:`~gradguard.Accumulator`, the batch becomes one of its micro-batches:
``acc.backward`` receives a stand-in loss whose backward adds the batch's
gradient, so the accumulator applies its usual exact weight (and GradScaler
scale) and keeps its bookkeeping; the in-flight gradients of the window's
earlier micro-batches are never touched by a retry.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Callable, List, Tuple, Union

import torch
from torch import nn

from ._errors import GradguardError
from . import _batch

__all__ = ["AutoBatchResult", "accumulate_batch"]

LossOut = Union[torch.Tensor, Tuple[torch.Tensor, Any]]


@dataclass(frozen=True)
class AutoBatchResult:
    """What :func:`accumulate_batch` did."""

    #: the batch's exact mean loss (weighted by counts); NaN when it had 0 items.
    loss: float
    #: items the loss averages over, summed over the micro-batches.
    count: float
    #: the micro-batch size that worked: pass it to the next call to skip the failed sizes.
    micro_batch_size: int
    #: how many out-of-memory errors were recovered from.
    retries: int


def accumulate_batch(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Any], LossOut],
    batch: Any,
    micro_batch_size: int,
    *,
    acc=None,
    min_micro_batch_size: int = 1,
) -> AutoBatchResult:
    """Back-propagate ``batch`` in micro-batches, halving their size on out-of-memory.

    Without ``acc`` it adds to ``.grad`` the gradient of the batch's mean loss
    (what ``loss_fn(model, batch).backward()`` would add), for every tensor
    requiring grad that the loss reaches, inside the model or not. With ``acc``
    the batch is one micro-batch of the accumulator (call ``acc.step()`` after
    it, as after ``acc.backward``): the accumulator weighs it like any other,
    and normalises the window's gradient of its optimizer's parameters; a
    trainable tensor outside that optimizer keeps the weighted sum, as with
    ``acc.backward`` (put it in the optimizer).

    Host reads: one per call (the returned ``loss``), plus one per micro-batch
    whose count is a tensor; the accumulator adds its one per window.

    Args:
        model: the module whose parameters get the gradient (a single process:
            DDP/FSDP2 models are not supported here).
        loss_fn: ``loss_fn(model, micro_batch)`` returning the mean loss over the
            micro-batch's items, or ``(loss, count)`` when the items are not the
            rows (e.g. non-ignored tokens). Without a count, the rows count. A
            count given as a tensor is read once per micro-batch (an int costs nothing).
        batch: a tensor, or a tuple/list/dict of tensors with the item dimension first.
        micro_batch_size: the size to try first.
        acc: an :class:`~gradguard.Accumulator` to feed, or None.
        min_micro_batch_size: give up (re-raise the out-of-memory error) below this.

    Returns:
        an :class:`AutoBatchResult` (loss, count, the size that worked, retries).

    Raises:
        torch.OutOfMemoryError: even ``min_micro_batch_size`` did not fit; the
            gradients are as they were before the call. (A CPU allocation
            failure is retried too and, at the end, reported the same way.)
        GradguardError: bad sizes, or a distributed ``acc``.

    >>> import torch, gradguard as gg
    >>> from gradguard.microbatches import accumulate_batch
    >>> model = torch.nn.Linear(3, 1)
    >>> x, y = torch.randn(10, 3), torch.randn(10, 1)
    >>> mse = lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])
    >>> result = accumulate_batch(model, mse, (x, y), micro_batch_size=4)
    >>> result.micro_batch_size, result.count
    (4, 10)
    """
    if isinstance(micro_batch_size, bool) or not isinstance(micro_batch_size, int) or micro_batch_size < 1:
        raise GradguardError(f"micro_batch_size must be an int >= 1, got {micro_batch_size!r}")
    if not isinstance(min_micro_batch_size, int) or not 1 <= min_micro_batch_size <= micro_batch_size:
        raise GradguardError(
            f"min_micro_batch_size must be an int between 1 and micro_batch_size={micro_batch_size}, got {min_micro_batch_size!r}"
        )
    if acc is not None and acc.world_size > 1:
        raise GradguardError(
            "accumulate_batch runs in one process: under DDP/FSDP2 every rank must run the same micro-batches, "
            "which a per-rank out-of-memory retry would break; pick the micro-batch size with `gradguard plan` instead"
        )
    n_items = _batch.length(batch)
    # Every trainable leaf the batch's losses reach, by id, and its .grad from before the call:
    # set aside (references, no copy) the first time a micro-batch reaches it.
    leaves: dict = {}
    before: dict = {}
    size, retries = min(micro_batch_size, max(n_items, 1)), 0
    try:
        while True:
            try:
                loss_sum, count = _run(model, loss_fn, batch, n_items, size, leaves, before)
                break
            except Exception as exc:  # noqa: BLE001 - only out-of-memory errors are retried
                if not _is_out_of_memory(exc):
                    raise
                failed = size
            # Outside the except block, so the traceback (and the tensors its frames hold) is gone.
            for leaf in leaves.values():
                leaf.grad = None  # this attempt's partial gradients: never counted
            _release_memory()
            if failed // 2 < min_micro_batch_size:
                raise torch.OutOfMemoryError(
                    f"accumulate_batch: out of memory even at micro-batch size {failed} "
                    f"(min_micro_batch_size={min_micro_batch_size}); the gradients are as before the call"
                )
            size, retries = failed // 2, retries + 1
        batch_grads = {i: leaf.grad for i, leaf in leaves.items()}
    finally:
        for i, leaf in leaves.items():
            leaf.grad = before[i]

    mean = loss_sum / count if count else torch.full_like(loss_sum, float("nan"))
    if acc is None:
        # Plain backward semantics: add the batch mean's gradient.
        for i, leaf in leaves.items():
            g = batch_grads[i]
            if g is not None and count:
                g.div_(count)
                leaf.grad = g if leaf.grad is None else leaf.grad.add_(g)
    else:
        targets = list(leaves.values()) or _params(model, acc)  # the stand-in must require grad
        grads = [batch_grads.get(id(t)) for t in targets]
        stand_in = _BatchLoss.apply(mean, count, grads, *targets)
        acc.backward(stand_in, count=count)
    return AutoBatchResult(loss=float(mean), count=count, micro_batch_size=size, retries=retries)


def _run(model, loss_fn, batch, n_items: int, size: int, leaves: dict, before: dict) -> Tuple[torch.Tensor, float]:
    """One attempt: every micro-batch's loss times its count, back-propagated into fresh .grad."""
    loss_sum, total = None, 0
    for start in range(0, n_items, size):
        stop = min(start + size, n_items)
        out = loss_fn(model, _batch.take(batch, start, stop))
        loss, count = out if isinstance(out, tuple) else (out, stop - start)
        count = count.item() if isinstance(count, torch.Tensor) else count
        if count:  # an empty micro-batch's mean is 0/0: it adds nothing
            for leaf in _graph_leaves(loss):
                if id(leaf) not in leaves:
                    leaves[id(leaf)], before[id(leaf)] = leaf, leaf.grad
                    leaf.grad = None
            (loss * count).backward()  # the sum of per-item losses: divided by the batch total at the end
            part = loss.detach().double() * count
            loss_sum = part if loss_sum is None else loss_sum + part
        total += count
    if loss_sum is None:
        loss_sum = torch.zeros((), dtype=torch.float64)
    return loss_sum, total


def _graph_leaves(loss: torch.Tensor) -> List[torch.Tensor]:
    """The tensors requiring grad whose .grad a backward of ``loss`` writes (its AccumulateGrad nodes)."""
    out, seen, stack = [], set(), [getattr(loss, "grad_fn", None)]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # AccumulateGrad: the node that writes a leaf's .grad
        if variable is not None:
            out.append(variable)
        stack.extend(nxt for nxt, _ in node.next_functions)
    if loss.is_leaf and loss.requires_grad:
        out.append(loss)
    return out


def _is_out_of_memory(exc: BaseException) -> bool:
    """CUDA/XPU/MPS out-of-memory errors, and the CPU allocator's (a plain RuntimeError)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("DefaultCPUAllocator: can't allocate memory" in text
                                              or "out of memory" in text.lower())


class _BatchLoss(torch.autograd.Function):
    """Stand-in for the batch's mean loss: its backward adds the already computed batch gradient.

    Autograd hands the backward the weight the accumulator put on this loss
    (count / (ref * steps), times the GradScaler's scale), so the gradient lands
    in ``.grad`` exactly as a real backward of the batch's mean loss would.
    """

    @staticmethod
    def forward(ctx, mean, count, grads, *params):
        ctx.count, ctx.grads = count, grads
        return mean.detach().clone()

    @staticmethod
    def backward(ctx, weight):
        grads, ctx.grads = ctx.grads, None
        scale = weight / ctx.count
        return (None, None, None, *[None if g is None else (g * scale.to(g.dtype)) for g in grads])


def _params(model: nn.Module, acc) -> List[torch.Tensor]:
    seen, out = set(), []
    sources = [model.parameters()]
    if acc is not None:
        sources.append(p for group in acc.optimizer.param_groups for p in group["params"])
    for source in sources:
        for p in source:
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def _release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
