"""What a loss's autograd graph says about how it was reduced and scaled.

Read at backward time from the root of the graph, a handful of nodes deep, with
no device synchronisation: shapes come from saved sizes, constant factors from
the wrapped Python numbers autograd saves on the CPU. Whatever the graph does
not show plainly (a factor held in a CUDA tensor, a sum of two losses, label
smoothing) is reported as unknown, and the rules then claim nothing.
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
    """

    kind: Optional[str] = None
    count: Count = None
    scaled: bool = False
    factor: Optional[float] = 1.0
    amp: bool = False


UNKNOWN = LossInfo()


def _host_number(t) -> Optional[float]:
    """The value of a saved constant, if it can be read without a device sync."""
    if isinstance(t, (int, float)):
        return float(t)
    if isinstance(t, torch.Tensor) and t.numel() == 1 and t.device.type == "cpu" and not t.requires_grad:
        return float(t.item())
    return None


def _is_constant(edge) -> bool:
    return edge[0] is None


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


def analyze_loss(root: torch.Tensor, amp_root: bool = False) -> LossInfo:
    """Read the reduction, item count and scaling of a scalar loss from its graph.

    ``amp_root``: ``root`` is what ``GradScaler.scale`` returned; its top
    multiplication is the scaler's factor, not a weighting of the loss.

    >>> x = torch.ones(6, 2, requires_grad=True)
    >>> analyze_loss((x * 3).mean() / 4)
    LossInfo(kind='mean', count=12, scaled=True, factor=0.25, amp=False)
    >>> analyze_loss(x.sum()).kind
    'sum'
    """
    node = root.grad_fn
    scaled = False
    factor: Optional[float] = 1.0
    amp = False
    # Strip the chain of constant scalings and casts above the reduction.
    for _ in range(16):
        if node is None:
            return LossInfo(amp=amp)
        name = node.name()
        if name in _IDENTITY:
            node = node.next_functions[0][0]
            continue
        if name == "NegBackward0":
            factor = None if factor is None else -factor
            node = node.next_functions[0][0]
            continue
        edges = node.next_functions
        if name in _SCALE or name in _ADD:
            live = [e for e in edges if not _is_constant(e)]
            if len(live) != 1:
                return LossInfo(amp=amp)  # e.g. loss_a + loss_b, loss * learnable: not a plain scaling
            if name in _SCALE:
                if amp_root and node is root.grad_fn:
                    # GradScaler.scale's own factor: unscale_ divides it back out of .grad
                    # before the step, so it does not change the step's gradient.
                    amp = True
                else:
                    scaled = True
                    value = _scale_value(node, name, edges)
                    factor = None if (value is None or factor is None) else factor * value
            node = live[0][0]
            continue
        break
    else:
        return LossInfo(amp=amp)
    name = node.name()
    if name == "MeanBackward0":
        return LossInfo("mean", int(node._saved_self_sym_numel), scaled, factor, amp)
    if name == "MeanBackward1":
        sizes = node._saved_self_sym_sizes
        dims = node._saved_dim or range(len(sizes))
        return LossInfo("mean", int(math.prod(sizes[d] for d in dims)), scaled, factor, amp)
    if name in ("SumBackward0", "SumBackward1"):
        return LossInfo("sum", None, scaled, factor, amp)
    reduction = getattr(node, "_saved_reduction", None)
    if reduction == _SUM:
        return LossInfo("sum", None, scaled, factor, amp)
    if reduction != _MEAN:
        return LossInfo(amp=amp)
    if name in _NLL:
        # The mean divides by total_weight: the number of non-ignored targets
        # (their summed class weights with ``weight=``). It is a tensor on the
        # loss's device; on a GPU it is read once at the end of the watch.
        total = node._saved_total_weight
        value = _host_number(total)
        return LossInfo("mean", value if value is not None else total.detach(), scaled, factor, amp)
    saved = getattr(node, "_saved_self", None)
    if isinstance(saved, torch.Tensor):  # element-wise losses: MSE, BCE, Huber, ...
        return LossInfo("mean", saved.numel(), scaled, factor, amp)
    return LossInfo(amp=amp)


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
