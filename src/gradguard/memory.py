"""How much memory a micro-batch size needs: :func:`measure_memory`.

Training memory is a fixed part (parameters, buffers, gradients, optimizer
state) plus the activations autograd saves for backward, which grow with the
micro-batch size. Accumulation trades the second for time: the largest
micro-batch that fits the budget, and ``ceil(batch / micro)`` accumulation
steps. The activations are measured with
``torch.autograd.graph.saved_tensors_hooks`` (every tensor the forward saves
for backward, each storage counted once, parameters excluded), which works
the same on every device; on CUDA the peak allocated memory of a real
forward and backward is reported beside it.

``gradguard plan`` (``gradguard/cli/plan.py``) prints this as a table and plot.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import nn

from . import _batch
from ._batch import length as batch_len, take  # noqa: F401  (memory.batch_len / memory.take: used by the plan command)
from ._errors import GradguardError

__all__ = ["MemoryRow", "MemoryReport", "measure_memory", "parse_bytes", "format_bytes"]

LossFn = Callable[[nn.Module, Any], torch.Tensor]


@dataclass(frozen=True)
class MemoryRow:
    """One micro-batch size: what it saved for backward, and (CUDA) the measured peak."""

    micro_batch_size: int
    #: bytes of the tensors autograd saved for backward (each storage once, parameters excluded).
    activation_bytes: int
    #: CUDA only: peak allocated bytes during forward and backward (None elsewhere).
    peak_bytes: Optional[int] = None


@dataclass
class MemoryReport:
    """What :func:`measure_memory` found: the fixed part and one row per micro-batch size.

    ``required(row)`` is the estimate used to decide what fits: the fixed part
    plus the activations; on CUDA at least the measured peak plus the optimizer
    state (which the measurement did not allocate).
    """

    rows: List[MemoryRow]
    param_bytes: int
    buffer_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    device: str
    batch_size: int = 0
    notes: List[str] = field(default_factory=list)

    @property
    def fixed_bytes(self) -> int:
        """Parameters + buffers + gradients + optimizer state: paid whatever the micro-batch size."""
        return self.param_bytes + self.buffer_bytes + self.grad_bytes + self.optimizer_bytes

    def required(self, row: MemoryRow) -> int:
        """Estimated bytes to train with ``row``'s micro-batch size."""
        estimate = self.fixed_bytes + row.activation_bytes
        if row.peak_bytes is not None:
            estimate = max(estimate, row.peak_bytes + self.optimizer_bytes)
        return estimate

    def largest_fitting(self, budget: int) -> Optional[MemoryRow]:
        """The row with the largest micro-batch size whose estimate fits ``budget`` bytes; None if none does."""
        fitting = [r for r in self.rows if self.required(r) <= budget]
        return max(fitting, key=lambda r: r.micro_batch_size) if fitting else None

    def table(self, budget: Optional[int] = None, *, fmt: Optional[Callable[[float], str]] = None) -> str:
        """The report as aligned text (one line per micro-batch size).

        ``fmt`` writes every byte figure (default :func:`format_bytes`): one format for all of them,
        so no figure reads more or less precise than the one beside it."""
        fmt = fmt or format_bytes
        head = ["micro-batch", "activations", "peak (CUDA)", "required"] + (["fits"] if budget is not None else [])
        lines = [head]
        for r in self.rows:
            cells = [
                str(r.micro_batch_size),
                fmt(r.activation_bytes),
                fmt(r.peak_bytes) if r.peak_bytes is not None else "-",
                fmt(self.required(r)),
            ]
            if budget is not None:
                cells.append("yes" if self.required(r) <= budget else "no")
            lines.append(cells)
        widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
        text = [
            f"device {self.device}; fixed {fmt(self.fixed_bytes)} = parameters {fmt(self.param_bytes)}"
            f" + buffers {fmt(self.buffer_bytes)} + gradients {fmt(self.grad_bytes)}"
            f" + optimizer state {fmt(self.optimizer_bytes)} (estimate)"
        ]
        for i, row in enumerate(lines):
            text.append("  ".join(c.rjust(w) for c, w in zip(row, widths)))
            if i == 0:
                text.append("  ".join("-" * w for w in widths))
        text.extend(f"note: {n}" for n in self.notes)
        return "\n".join(text)


def measure_memory(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Any,
    micro_batch_sizes: Iterable[int],
    *,
    optimizer_states: float = 2.0,
    progress: Optional[Callable[[Iterable[int]], Iterable[int]]] = None,
) -> MemoryReport:
    """Measure the memory each micro-batch size needs to train ``model``.

    For each size ``m`` the first ``m`` items of ``batch`` go through
    ``loss_fn(model, micro_batch)``; the tensors autograd saves for backward
    are counted (each storage once, parameters and buffers excluded). On CUDA
    the forward and backward run for real and the peak allocated memory is
    recorded too. Existing ``.grad`` values are put back afterwards.

    Args:
        model: the model, on the device it will train on, in the mode it trains in.
        loss_fn: ``loss_fn(model, micro_batch) -> scalar loss`` (the same contract as
            :func:`gradguard.check_equivalence`).
        batch: a tensor, or a tuple/list/dict of tensors, whose first dimension
            is the item dimension (non-tensor leaves are passed through).
        micro_batch_sizes: the sizes to measure (each at most the batch's size).
        optimizer_states: optimizer state per gradient element, as a multiple of
            the gradient's size: 2 for Adam/AdamW, 1 for SGD with momentum, 0 for plain SGD.
        progress: optional wrapper for the loop over sizes (e.g. a tqdm bar).

    Returns:
        a :class:`MemoryReport`; ``report.table()`` is its text form.

    Raises:
        GradguardError: an empty size list, a size < 1 or larger than the batch.

    >>> import torch, gradguard as gg
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    >>> x = torch.randn(4, 8)
    >>> report = gg.measure_memory(model, lambda m, b: m(b).pow(2).mean(), x, [1, 2, 4])
    >>> [r.activation_bytes for r in report.rows]     # grows with the micro-batch size
    [100, 200, 400]
    """
    sizes = sorted(set(int(s) for s in micro_batch_sizes))
    n = _batch.length(batch)
    if not sizes:
        raise GradguardError("micro_batch_sizes is empty: pass the sizes to measure, e.g. [1, 2, 4, 8]")
    if sizes[0] < 1 or sizes[-1] > n:
        raise GradguardError(
            f"micro-batch sizes must be between 1 and the batch's {n} items, got {sizes[0]}..{sizes[-1]}: "
            "pass a larger example batch or smaller sizes"
        )
    params = list(model.parameters())
    param_keys = {_storage_key(p) for p in params} | {_storage_key(b) for b in model.buffers()}
    param_bytes = _unique_bytes(params)
    buffer_bytes = _unique_bytes(list(model.buffers()))
    trainable = {id(p): p for p in params if p.requires_grad}.values()
    grad_bytes = sum(p.numel() * p.element_size() for p in trainable)
    device = params[0].device if params else torch.device("cpu")
    on_cuda = device.type == "cuda" and torch.cuda.is_available()

    rows = []
    iterator = progress(sizes) if progress is not None else sizes
    saved_grads = [p.grad for p in params]
    try:
        for m in iterator:
            # A copy, as a data loader would deliver it: a slice would share the full batch's storage.
            rows.append(_measure_one(model, loss_fn, _batch.copy(_batch.take(batch, m)), m, param_keys, params, device if on_cuda else None))
    finally:
        for p, g in zip(params, saved_grads):
            p.grad = g
    notes = []
    if not on_cuda:
        notes.append("no CUDA peak on this device: 'required' is the fixed part plus the saved activations "
                     "(temporaries of the forward and backward come on top)")
    return MemoryReport(
        rows=rows,
        param_bytes=param_bytes,
        buffer_bytes=buffer_bytes,
        grad_bytes=grad_bytes,
        optimizer_bytes=int(optimizer_states * grad_bytes),
        device=str(device),
        batch_size=n,
        notes=notes,
    )


def _measure_one(model, loss_fn, micro_batch, m, param_keys, params, cuda_device) -> MemoryRow:
    # storage -> (first byte, end byte) that saved views reach: a storage saved through
    # several views is counted once, and only the part the views cover.
    spans: Dict[Tuple, Tuple[int, int]] = {}

    def pack(t: torch.Tensor):
        key = _storage_key(t)
        if key not in param_keys:
            lo, hi = _byte_span(t)
            old = spans.get(key)
            spans[key] = (lo, hi) if old is None else (min(lo, old[0]), max(hi, old[1]))
        return t

    if cuda_device is not None:
        for p in params:
            p.grad = None
        torch.cuda.synchronize(cuda_device)
        torch.cuda.reset_peak_memory_stats(cuda_device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model, micro_batch)
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
        raise GradguardError(f"loss_fn must return a scalar tensor, got {type(loss).__name__} "
                             f"{tuple(loss.shape) if isinstance(loss, torch.Tensor) else ''} for micro-batch size {m}")
    peak = None
    if cuda_device is not None:
        if loss.requires_grad:
            loss.backward()  # the backward's own temporaries and the gradients belong in the peak
        torch.cuda.synchronize(cuda_device)
        peak = int(torch.cuda.max_memory_allocated(cuda_device))
        for p in params:
            p.grad = None
    del loss  # frees the graph and its saved tensors before the next size
    return MemoryRow(micro_batch_size=m, activation_bytes=sum(hi - lo for lo, hi in spans.values()), peak_bytes=peak)


def _storage_key(t: torch.Tensor) -> Tuple:
    try:
        storage = t.untyped_storage()
        return (str(t.device), storage.data_ptr(), storage.nbytes()) if storage.data_ptr() else ("empty", id(t))
    except (RuntimeError, NotImplementedError):  # tensor subclasses without a plain storage
        return ("object", id(t))


def _byte_span(t: torch.Tensor) -> Tuple[int, int]:
    """Bytes of its storage that ``t`` can reach: [offset, offset + extent)."""
    if t.numel() == 0:
        return (0, 0)
    try:
        extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
        start = t.storage_offset()
    except (RuntimeError, NotImplementedError):  # no strides (e.g. some subclasses): assume dense
        extent, start = t.numel(), 0
    return (start * t.element_size(), (start + extent) * t.element_size())


def _storage_bytes(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return t.numel() * t.element_size()


def _unique_bytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum({_storage_key(t): _storage_bytes(t) for t in tensors}.values())


# -------------------------------------------------------------------- bytes
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def parse_bytes(text: str) -> int:
    """``"2GiB"`` -> 2147483648; decimal (kB, MB, GB) and binary (KiB, MiB, GiB) units, or a plain number.

    >>> parse_bytes("64MiB"), parse_bytes("1.5 GB"), parse_bytes("4096")
    (67108864, 1500000000, 4096)
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise GradguardError(f"cannot read {text!r} as a memory size: write e.g. 2GiB, 512MiB, 1.5GB or 1000000")
    return int(float(match.group(1)) * _UNITS[unit])


def format_bytes(n: Optional[float]) -> str:
    """Binary units, 3 significant digits: ``format_bytes(3 * 2**20)`` -> ``'3.00 MiB'``."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            if unit == "B":
                return f"{n:.0f} B"
            # Three significant digits at every size (3.00, 60.9, 244), so figures side by side read
            # equally precise; 1023.9 rounds to 1024 rather than the next unit's 1.00.
            return f"{n:.{2 if abs(n) < 9.995 else 1 if abs(n) < 99.95 else 0}f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"  # pragma: no cover


def default_sizes(batch_size: int) -> List[int]:
    """Powers of two up to ``batch_size``, and ``batch_size`` itself."""
    sizes = [2**i for i in range(int(math.log2(batch_size)) + 1)] if batch_size >= 1 else []
    return sorted(set(sizes + [batch_size]))
