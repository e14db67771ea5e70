"""The seed semantics, made checkable: :func:`grads_per_step`.

(:func:`check_equivalence` lives in :mod:`gradguard.equivalence`; importing it
from here keeps working.)"""

from __future__ import annotations

from typing import Callable, Optional

import torch

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

