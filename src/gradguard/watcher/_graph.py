"""What a loss's autograd graph says about how it was reduced and scaled.

Read at backward time from the root of the graph, a handful of nodes deep, with
no device synchronisation: shapes come from saved sizes, constant factors from
the wrapped Python numbers autograd saves on the CPU. Whatever the graph does
not show plainly (a factor held in a CUDA tensor, a product of two losses,
label smoothing) is reported as unknown, and the rules then claim nothing.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Union

import torch

# Node names that pass the loss's gradient through unchanged (casts, views).
_IDENTITY = frozenset(
    {
        "ToCopyBackward0",
        "CloneBackward0",
        "ViewBackward0",
        "UnsafeViewBackward0",
        "SqueezeBackward0",
        "SqueezeBackward1",
        "SqueezeBackward2",
        "UnsqueezeBackward0",
        "ReshapeAliasBackward0",
        "AliasBackward0",
        "ExpandBackward0",
    }
)
# Constant factors: ``loss / k``, ``loss * w`` (k, w without grad).
_SCALE = frozenset({"MulBackward0", "MulBackward1", "DivBackward0", "DivBackward1"})
# Adding a constant does not change the gradient.
_ADD = frozenset({"AddBackward0", "AddBackward1", "SubBackward0", "SubBackward1"})
# reduction enum of ATen losses: 0 none, 1 mean, 2 sum.
_MEAN, _SUM = 1, 2
_NLL = frozenset({"NllLossBackward0", "NllLoss2DBackward0"})

#: an item count: an int/float when known on the host, a 0-dim tensor when it
#: lives on a device (read later, once, so that backward never syncs).
Count = Union[int, float, torch.Tensor, None]


class LossInfo(NamedTuple):
    """How one backward pass's root was reduced and scaled.

    kind: ``"mean"``, ``"sum"`` or ``None`` (unknown).
    count: the number of items the mean ran over (see :data:`Count`).
    scaled: a constant factor multiplied the reduced loss.
    factor: that factor when known on the host (1.0 when unscaled), else None.
    amp: the loss came from ``GradScaler.scale``, which may skip the step.
    terms: how many mean reductions the loss adds up (a weighted sum such as
        ``alpha * kl + (1 - alpha) * ce``); ``factor`` is then the sum of their
        weights' magnitudes, ``count`` their common item count (None when they
        differ or a sum-reduced term is added in).
    outer: for ``terms > 1``, the constant factor applied to the whole sum
        (``(a + b) / k``: ``1 / k``; 1.0 when none; None when unreadable).
    """

    kind: Optional[str] = None
    count: Count = None
    scaled: bool = False
    factor: Optional[float] = 1.0
    amp: bool = False
    terms: int = 1
    outer: Optional[float] = 1.0
    #: for a ``"sum"``: how many items it added where the host knows it (an nll_loss's non-ignored targets,
    #: read from its total weight on the CPU), else None
    items: Count = None


UNKNOWN = LossInfo()

# Graph nodes read per loss at most: a loss adding a few dozen terms is still read whole,
# a pathological graph costs a bounded walk and is reported as unknown.
_BUDGET = 64


def _host_number(t) -> Optional[float]:
    """The value of a saved constant, if it can be read without a device sync."""
    if isinstance(t, (int, float)):
        return float(t)
    if isinstance(t, torch.Tensor) and t.numel() == 1 and t.device.type == "cpu" and not t.requires_grad:
        return float(t.item())
    return None


def _is_constant(edge) -> bool:
    return edge[0] is None


def _times(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else a * b


def parameters_reached(roots) -> list:
    """The ``nn.Parameter`` leaves whose ``.grad`` a backward pass from ``roots`` (tensors) writes (its
    ``AccumulateGrad`` nodes' variables; inputs that require grad are no parameters). A walk of the
    whole graph: done once, for the first pass."""
    out, seen = [], set()
    stack = [t.grad_fn for t in roots if isinstance(t, torch.Tensor)]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.nn.Parameter):
            out.append(variable)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return out


def analyze_loss(root: torch.Tensor, amp_root: bool = False, seed: float = 1.0) -> LossInfo:
    """Read the reduction, item count and scaling of a scalar loss from its graph.

    ``amp_root``: ``root`` is what ``GradScaler.scale`` returned; its top
    multiplication is the scaler's factor, not a weighting of the loss.
    ``seed``: the value the backward pass starts from (``loss.backward(seed)``):
    the same as multiplying the loss by it.

    A loss that adds up several reductions, each times a constant
    (``alpha * kl_batchmean + (1 - alpha) * ce``, ``mse + l1 * sparsity.mean()``),
    is read term by term: it is a mean over the micro-batch when every term is
    a mean, and when some terms are sums its mean terms are still reported
    (a sum's gradient adds up across micro-batches as it should; the mean
    terms' does not). A product of two losses, a learnable weight or any term
    the graph does not show plainly makes the whole loss unknown.

    >>> x = torch.ones(6, 2, requires_grad=True)
    >>> analyze_loss((x * 3).mean() / 4)
    LossInfo(kind='mean', count=12, scaled=True, factor=0.25, amp=False, terms=1, outer=1.0, items=None)
    >>> analyze_loss(x.sum()).kind
    'sum'
    >>> analyze_loss((x.mean() + 0.5 * x.abs().mean()) / 2)
    LossInfo(kind='mean', count=12, scaled=True, factor=0.75, amp=False, terms=2, outer=0.5, items=None)
    >>> analyze_loss(x.mean(), seed=0.25) == analyze_loss(x.mean() * 0.25)
    True
    """
    node = root.grad_fn
    amp = False
    if amp_root and node is not None and node.name() in _SCALE:
        # GradScaler.scale's own factor: unscale_ divides it back out of .grad
        # before the step, so it does not change the step's gradient.
        live = [e for e in node.next_functions if not _is_constant(e)]
        if len(live) != 1:
            return LossInfo(amp=True)
        amp, node = True, live[0][0]
    walk = _Walk()
    terms = walk.terms(node, seed, seed != 1.0)
    if terms is None:
        return LossInfo(amp=amp)
    if len(terms) == 1:
        return terms[0]._replace(amp=amp)
    return _combine(terms, walk.outer, amp)


def _combine(terms, outer: Optional[float], amp: bool) -> LossInfo:
    """One LossInfo for a weighted sum of reductions (see :class:`LossInfo`)."""
    means = [t for t in terms if t.kind == "mean"]
    scaled = any(t.scaled for t in terms)
    if not means:
        return LossInfo("sum", None, scaled, None, amp, len(terms), outer)
    factors = [t.factor for t in means]
    factor = None if any(f is None for f in factors) else sum(abs(f) for f in factors)
    counts = [t.count for t in means]
    count = None
    if len(means) == len(terms) and all(isinstance(c, (int, float)) for c in counts):
        if all(c == counts[0] for c in counts):
            count = counts[0]  # every term a mean over the same items: per-item weight factor / count
    if len(means) == 1:
        t = means[0]
        return LossInfo("mean", count, t.scaled, t.factor, amp, 1, 1.0)
    return LossInfo("mean", count, scaled, factor, amp, len(means), outer)


class _Walk:
    """A bounded walk down a loss's graph through casts, constant scalings and sums of terms."""

    def __init__(self):
        self.budget = _BUDGET
        self.outer: Optional[float] = 1.0  # the factor above the first sum of two live terms
        self.split = False

    def terms(self, node, factor: Optional[float], scaled: bool) -> Optional[list]:
        """The reductions under ``node`` as LossInfo (their factors include ``factor``), or None: unknown."""
        divisor = None  # a constant this chain divided by just above ``node`` (sum / n is a mean)
        scaled_before = scaled
        while True:
            self.budget -= 1
            if node is None or self.budget < 0:
                return None
            name = node.name()
            if name in _IDENTITY:
                node = node.next_functions[0][0]
                continue
            if name == "NegBackward0":
                factor = None if factor is None else -factor
                divisor = None
                node = node.next_functions[0][0]
                continue
            if name not in _SCALE and name not in _ADD:
                term = self._reduction(node, name, factor, scaled, divisor, scaled_before)
                return None if term is None else [term]
            edges = node.next_functions
            live = [e for e in edges if not _is_constant(e)]
            if len(live) == 2 and name in ("AddBackward0", "SubBackward0"):
                return self._split(node, name, edges, factor, scaled)
            if len(live) != 1:
                return None  # loss * learnable, loss_a * loss_b: not a plain scaling
            divisor = None
            if name in _SCALE:
                scaled_before = scaled
                scaled = True
                value = _scale_value(node, name, edges)
                factor = _times(factor, value)
                if value and name.startswith("Div"):
                    divisor = 1.0 / value
            node = live[0][0]

    def _split(self, node, name, edges, factor, scaled) -> Optional[list]:
        # self + alpha * other (add), self - alpha * other (sub)
        if not self.split:
            self.split, self.outer = True, factor
        alpha = _host_number(getattr(node, "_saved_alpha", 1))
        weight = None if alpha is None else (alpha if name.startswith("Add") else -alpha)
        first = self.terms(edges[0][0], factor, scaled)
        if first is None:
            return None
        second = self.terms(edges[1][0], _times(factor, weight), scaled or weight != 1)
        return None if second is None else first + second

    @staticmethod
    def _reduction(node, name, factor, scaled, divisor, scaled_before) -> Optional[LossInfo]:
        if name == "MeanBackward0":
            return LossInfo("mean", int(node._saved_self_sym_numel), scaled, factor)
        if name == "MeanBackward1":
            sizes = node._saved_self_sym_sizes
            dims = node._saved_dim or range(len(sizes))
            return LossInfo("mean", int(math.prod(sizes[d] for d in dims)), scaled, factor)
        if name == "SumBackward0":
            sizes = [int(s) for s in node._saved_self_sym_sizes]
            # sum / numel is a mean; sum / size(0) a mean over the first dimension's items
            # (kl_div's "batchmean"). The division is then the reduction's, not a scaling.
            if divisor is not None and factor is not None:
                for count in (math.prod(sizes), sizes[0] if sizes else None):
                    if count and abs(divisor - count) <= 1e-9 * count:
                        return LossInfo("mean", count, scaled_before, factor * divisor)
                # (loss * mask).sum() / d: a weighted sum over the mask's items, divided: a mean over
                # ``mask.sum()`` items (as nll_loss's total weight) whose per-item weight is factor, so its
                # factor as a mean is factor * mask.sum() (1 where d is that count: the reduction's own)
                weight = _weights_summed(node, sizes)
                if weight is not None and weight >= 0:
                    if weight and abs(divisor - weight) <= 1e-9 * weight:
                        return LossInfo("mean", weight, scaled_before, factor * divisor)
                    return LossInfo("mean", weight, True, factor * weight)
            return LossInfo("sum", None, scaled, factor)
        if name == "SumBackward1":
            return LossInfo("sum", None, scaled, factor)
        reduction = getattr(node, "_saved_reduction", None)
        if reduction == _SUM:
            # (an nll_loss's summed items: its total weight, read only where it is a host number, no sync;
            # with class weights it is their sum, not a count: left unknown)
            items = _host_number(node._saved_total_weight) if name in _NLL and _unweighted(node) else None
            return LossInfo("sum", None, scaled, factor, items=items)
        if reduction != _MEAN:
            return None
        if name in _NLL:
            # The mean divides by total_weight: the number of non-ignored targets
            # (their summed class weights with ``weight=``). It is a tensor on the
            # loss's device; on a GPU it is read once at the end of the watch.
            total = node._saved_total_weight
            value = _host_number(total)
            return LossInfo("mean", value if value is not None else total.detach(), scaled, factor)
        saved = getattr(node, "_saved_self", None)
        if isinstance(saved, torch.Tensor):  # element-wise losses: MSE, BCE, Huber, ...
            return LossInfo("mean", saved.numel(), scaled, factor)
        return None


def _unweighted(node) -> bool:
    """An nll_loss node without class weights (its total weight then counts the non-ignored targets)."""
    try:
        return getattr(node, "_saved_weight", None) is None
    except RuntimeError:
        return False


def _weights_summed(node, sizes) -> Optional[float]:
    """The number of items a 0/1 mask keeps where a sum's input was multiplied by it just below the sum
    (``(loss * mask).sum()``): a tensor of the summed shape, without grad, on the host (a mask on a device is
    left unread: no sync)."""
    try:
        below = node.next_functions[0][0]
        if below is None or below.name() != "MulBackward0":
            return None
        edges = below.next_functions
        if sum(1 for e in edges if not _is_constant(e)) != 1:
            return None
        weights = below._saved_other if not _is_constant(edges[0]) else below._saved_self
    except (AttributeError, RuntimeError, IndexError):
        return None
    if not isinstance(weights, torch.Tensor) or weights.requires_grad or weights.device.type != "cpu":
        return None
    if [int(s) for s in weights.shape] != sizes or not (weights.is_floating_point() or weights.dtype == torch.bool):
        return None
    if not bool(((weights == 0) | (weights == 1)).all()):
        return None  # weights, not a mask: what an item counts for is the program's choice
    return float(weights.sum())


def _scale_value(node, name: str, edges) -> Optional[float]:
    """The constant factor of a Mul/Div node, when it is a host number."""
    try:
        if name.startswith("Div"):
            if _is_constant(edges[0]):
                return None  # k / loss: not a scaling of the loss
            other = _host_number(node._saved_other)
            return None if not other else 1.0 / other
        const = node._saved_other if not _is_constant(edges[0]) else node._saved_self
        return _host_number(const)
    except (AttributeError, RuntimeError):
        return None
