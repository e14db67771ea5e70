"""What a batch is, in one place: its length, a slice of it, its split into micro-batches.

A batch is a tensor, or any nesting of tuple / list / namedtuple / dict whose
tensor leaves share the item dimension first; other leaves (strings, ints,
0-dim tensors) are passed through unchanged. Used by ``check_equivalence``,
``measure_memory``, ``accumulate_batch`` and the demo.

The package-internal API:

* ``length(batch) -> int``: items in the batch.
* ``take(batch, start, stop=None)``: items ``[start:stop]`` (``take(batch, m)``: the first ``m``).
* ``split_sizes(splits, n) -> list[int]``: ``splits`` (a number of near-equal
  micro-batches, or the list of their sizes) checked against ``n`` items.
* ``split(batch, sizes) -> list``: the micro-batches of those sizes, in order.
* ``copy(batch)``: the same structure with every tensor cloned (own storage).
* ``map_tensors(batch, fn)``: the same structure with ``fn`` applied to every tensor.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Union

import torch

from ._errors import GradguardError

__all__ = ["length", "take", "split_sizes", "split", "copy", "map_tensors"]


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``batch`` with ``fn`` applied to every tensor leaf (structure and other leaves kept)."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return type(batch)((k, map_tensors(v, fn)) for k, v in batch.items())
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(map_tensors(v, fn) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(map_tensors(v, fn) for v in batch)
    return batch


def _leaves(batch: Any):
    if isinstance(batch, dict):
        for v in batch.values():
            yield from _leaves(v)
    elif isinstance(batch, (tuple, list)):
        for v in batch:
            yield from _leaves(v)
    else:
        yield batch


def length(batch: Any) -> int:
    """Number of items in ``batch``: the first dimension of its first tensor with one.

    >>> length({"x": torch.zeros(5, 3), "y": (torch.zeros(5), "label")})
    5
    """
    for leaf in _leaves(batch):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return int(leaf.shape[0])
    raise GradguardError(
        f"the batch ({type(batch).__name__}) holds no tensor with an item dimension: pass a tensor, "
        "or a tuple/list/dict of tensors whose first dimension indexes the items"
    )


def take(batch: Any, start: int, stop: Optional[int] = None) -> Any:
    """Items ``[start:stop]`` of ``batch`` (``take(batch, m)``: the first ``m``); views, no copy."""
    if stop is None:
        start, stop = 0, start
    return map_tensors(batch, lambda t: t[start:stop] if t.dim() > 0 else t)


def copy(batch: Any) -> Any:
    """``batch`` with every tensor cloned: a micro-batch as a data loader delivers it, with its own storage."""
    return map_tensors(batch, lambda t: t.clone())


def split_sizes(splits: Union[int, Sequence[int]], n: int) -> List[int]:
    """Micro-batch sizes for ``n`` items: ``splits`` near-equal ones, or the given sizes, checked.

    >>> split_sizes(3, 10), split_sizes([4, 6], 10)
    ([4, 3, 3], [4, 6])
    """
    if isinstance(splits, int) and not isinstance(splits, bool):
        if not 1 <= splits <= n:
            raise GradguardError(f"splits={splits} micro-batches does not fit a batch of {n}: use 1..{n}")
        base, extra = divmod(n, splits)
        return [base + (i < extra) for i in range(splits)]
    sizes = list(splits)
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes) or sum(sizes) != n:
        raise GradguardError(f"splits={sizes!r} must be positive ints summing to the batch size {n}")
    return sizes


def split(batch: Any, sizes: Sequence[int]) -> List[Any]:
    """The micro-batches of ``batch`` with these sizes, in order (views)."""
    out, at = [], 0
    for s in sizes:
        out.append(take(batch, at, at + s))
        at += s
    return out
