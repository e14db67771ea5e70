"""Marks that other parts of gradguard set around their own backward passes.

Kept free of torch imports so that :mod:`gradguard.accumulate` can use it at no
cost. The watch reads the mark when a backward pass starts: a pass made inside
:func:`accumulator_backward` has its loss weighted by the Accumulator, which
owns the scaling, so the watch does not second-guess it (GG104; GG105 only
when the Accumulator was given item counts). A clearing of ``.grad`` made
inside :func:`accumulator_clearing` is the Accumulator's own (after its step,
or dropping a window on purpose) and is never a discarded gradient (GG102).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional

_local = threading.local()

# Called (no arguments) when the outermost accumulator_clearing block ends, still
# inside the mark: a running watch registers here to see clearings it has no
# wrapper for (the Accumulator's ``p.grad = None`` when it drops a window).
_clearing_listeners: List[Callable[[], None]] = []


@contextmanager
def accumulator_backward(*, counted: bool = True) -> Iterator[None]:
    """Mark the backward passes made inside the block as weighted by an Accumulator.

    ``gradguard.Accumulator.backward`` wraps its ``backward()`` call in this;
    :func:`gradguard.watch` then skips the loss-scaling rule GG104 for those
    passes, and still tracks where their gradients go.

    Args:
        counted: the micro-batch came with an item count, so the Accumulator
            weighs it exactly (GG105 cannot apply). ``False`` (``count=None``):
            the Accumulator weighs every micro-batch the same, and the watch
            checks GG105 as for a plain ``loss / steps``: means over different
            numbers of items weighted equally are a mean of means.

    >>> from gradguard.watcher._marks import accumulator_backward, accumulator_counted, in_accumulator_backward
    >>> with accumulator_backward():
    ...     in_accumulator_backward(), accumulator_counted()
    (True, True)
    >>> with accumulator_backward(counted=False):
    ...     accumulator_counted()
    False
    >>> in_accumulator_backward(), accumulator_counted()
    (False, None)
    """
    stack = getattr(_local, "counted", None)
    if stack is None:
        stack = _local.counted = []
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    stack.append(bool(counted))
    try:
        yield
    finally:
        _local.depth = depth
        del stack[len(stack) - 1:]


def accumulator_counted() -> Optional[bool]:
    """Inside :func:`accumulator_backward`: its ``counted`` flag (innermost block); outside: None."""
    stack = getattr(_local, "counted", None)
    return stack[-1] if stack else None


def in_accumulator_backward() -> bool:
    """True inside :func:`accumulator_backward` (on this thread).

    >>> in_accumulator_backward()
    False
    """
    return getattr(_local, "depth", 0) > 0


@contextmanager
def accumulator_clearing() -> Iterator[None]:
    """Mark the clearing of ``.grad`` done inside the block as the Accumulator's own.

    ``gradguard.Accumulator`` clears gradients after a step and when it drops a
    window on purpose; the watch does not report those (GG102). Any other
    clearing of an Accumulator's in-flight gradients (a ``zero_grad()`` left in
    the loop) is a discarded gradient like any other.

    >>> from gradguard.watcher._marks import accumulator_clearing, in_accumulator_clearing
    >>> with accumulator_clearing():
    ...     in_accumulator_clearing()
    True
    """
    depth = getattr(_local, "clearing", 0)
    _local.clearing = depth + 1
    try:
        yield
    finally:
        try:
            if depth == 0:
                for listener in list(_clearing_listeners):
                    listener()
        finally:
            _local.clearing = depth


def in_accumulator_clearing() -> bool:
    """True inside :func:`accumulator_clearing` (on this thread)."""
    return getattr(_local, "clearing", 0) > 0
