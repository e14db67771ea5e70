"""Marks that other parts of gradguard set around their own backward passes.

Kept free of torch imports so that :mod:`gradguard.accumulate` can use it at no
cost. The watch reads the mark when a backward pass starts: a pass made inside
:func:`accumulator_backward` has its loss weighted by the Accumulator, which
owns the scaling, so the watch does not second-guess it (GG104/GG105).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

_local = threading.local()


@contextmanager
def accumulator_backward() -> Iterator[None]:
    """Mark the backward passes made inside the block as weighted by an Accumulator.

    ``gradguard.Accumulator.backward`` wraps its ``backward()`` call in this;
    :func:`gradguard.watch` then skips the loss-scaling rules (GG104, GG105)
    for those passes, and still tracks where their gradients go.

    >>> from gradguard.watch import accumulator_backward, in_accumulator_backward
    >>> with accumulator_backward():
    ...     in_accumulator_backward()
    True
    >>> in_accumulator_backward()
    False
    """
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth


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
        _local.clearing = depth


def in_accumulator_clearing() -> bool:
    """True inside :func:`accumulator_clearing` (on this thread)."""
    return getattr(_local, "clearing", 0) > 0
