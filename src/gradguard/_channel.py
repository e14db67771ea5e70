"""The ground floor between gradguard's core and its diagnostics.

The Accumulator marks its own backward passes and its own clearing of ``.grad``
here; a running :func:`gradguard.watch` subscribes to hear about them. The
core therefore imports nothing of the watch, and this module imports nothing
at all beyond the standard library (it costs the Accumulator nothing).

The marks are per thread: a mark set on one thread says nothing about a
backward pass running on another.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Tuple

__all__ = [
    "accumulator_backward",
    "accumulator_clearing",
    "accumulator_counted",
    "accumulator_weight",
    "framework_divisor",
    "framework_window",
    "in_accumulator_backward",
    "in_accumulator_clearing",
    "subscribe_clearing",
    "listening",
]

_local = threading.local()
_lock = threading.Lock()
# Replaced, never mutated: a thread reading it never sees a half-changed tuple.
_clearing_listeners: Tuple[Callable[[], None], ...] = ()


class Subscription:
    """A listener registered with :func:`subscribe_clearing`; :meth:`remove` it when done."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[], None]):
        self._fn = fn

    def remove(self) -> None:
        """Stop calling the listener (idempotent)."""
        global _clearing_listeners
        fn, self._fn = self._fn, None
        if fn is None:
            return
        with _lock:
            _clearing_listeners = tuple(f for f in _clearing_listeners if f is not fn)


def subscribe_clearing(fn: Callable[[], None]) -> Subscription:
    """Call ``fn()`` when an outermost :func:`accumulator_clearing` block ends, still inside the mark.

    It runs on the thread that cleared. The watch uses it to see clearings it
    has no wrapper for (the Accumulator's ``p.grad = None`` when it drops a window).

    >>> calls = []
    >>> sub = subscribe_clearing(lambda: calls.append(in_accumulator_clearing()))
    >>> with accumulator_clearing():
    ...     pass
    >>> sub.remove()
    >>> with accumulator_clearing():
    ...     pass
    >>> calls
    [True]
    """
    global _clearing_listeners
    with _lock:
        _clearing_listeners = _clearing_listeners + (fn,)
    return Subscription(fn)


def listening() -> bool:
    """True while a diagnostic (a running :func:`gradguard.watch`) is subscribed.

    The marks below are read only by subscribers: the Accumulator skips its
    per-micro-batch mark when nobody listens (the common, unwatched run).

    >>> listening()
    False
    """
    return bool(_clearing_listeners)


class accumulator_backward:  # noqa: N801 - used like the function (a context manager) it replaces
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
        weight: the value the backward pass is seeded with (``grad_tensors``):
            the Accumulator weighs a loss by seeding its pass rather than
            multiplying it, so the watch reads the weight here, on the host,
            instead of from the seed tensor (a device read on a GPU).

    >>> with accumulator_backward():
    ...     in_accumulator_backward(), accumulator_counted()
    (True, True)
    >>> with accumulator_backward(counted=False):
    ...     accumulator_counted()
    False
    >>> in_accumulator_backward(), accumulator_counted()
    (False, None)
    >>> with accumulator_backward(weight=0.25):
    ...     accumulator_weight()
    0.25
    """

    # A class, not a generator context manager: the Accumulator enters it once per
    # micro-batch, and this costs a fraction of contextlib's machinery.
    __slots__ = ("_mark", "_stack")

    def __init__(self, *, counted: bool = True, weight: float = 1.0) -> None:
        self._mark = (bool(counted), float(weight))
        self._stack: Optional[list] = None

    def __enter__(self) -> None:
        stack = getattr(_local, "counted", None)
        if stack is None:
            stack = _local.counted = []
        stack.append(self._mark)
        self._stack = stack

    def __exit__(self, *exc) -> None:
        stack, self._stack = self._stack, None
        if stack:
            del stack[len(stack) - 1:]


def accumulator_counted() -> Optional[bool]:
    """Inside :func:`accumulator_backward`: its ``counted`` flag (innermost block); outside: None."""
    stack = getattr(_local, "counted", None)
    return stack[-1][0] if stack else None


def accumulator_weight() -> Optional[float]:
    """Inside :func:`accumulator_backward`: the weight its pass is seeded with (innermost block); outside: None."""
    stack = getattr(_local, "counted", None)
    return stack[-1][1] if stack else None


def in_accumulator_backward() -> bool:
    """True inside :func:`accumulator_backward` (on this thread).

    >>> in_accumulator_backward()
    False
    """
    return bool(getattr(_local, "counted", None))


@contextmanager
def accumulator_clearing() -> Iterator[None]:
    """Mark the clearing of ``.grad`` done inside the block as the Accumulator's own.

    ``gradguard.Accumulator`` clears gradients after a step and when it drops a
    window on purpose; the watch does not report those (GG102). Any other
    clearing of an Accumulator's in-flight gradients (a ``zero_grad()`` left in
    the loop) is a discarded gradient like any other.

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
                for listener in _clearing_listeners:
                    listener()
        finally:
            _local.clearing = depth


def in_accumulator_clearing() -> bool:
    """True inside :func:`accumulator_clearing` (on this thread)."""
    return getattr(_local, "clearing", 0) > 0


class framework_divisor:  # noqa: N801 - used like a function (a context manager), as accumulator_backward
    """Mark the backward passes made inside the block as a framework's, whose loss it divided by ``divisor``.

    A framework that accumulates gradients itself (PyTorch Lightning's automatic
    optimization with ``accumulate_grad_batches=K``) divides every micro-batch's
    loss by K, whatever the number of micro-batches the window that steps really
    has. Its integration wraps each such backward pass in this mark, so that a
    running :func:`gradguard.watch` knows the divisor (GG111 then reports a step
    that closes a window of fewer than K passes). ``origin``: the ``(path, line)``
    where the user chose K (the ``Trainer(...)`` call), or None; ``advice``: the
    framework's own fix.

    >>> with framework_divisor(4, ("train.py", 12), "use the callback"):
    ...     framework_window()
    (4, ('train.py', 12), 'use the callback')
    >>> framework_window() is None
    True
    """

    __slots__ = ("_mark", "_stack")

    def __init__(self, divisor: int, origin=None, advice: Optional[str] = None) -> None:
        self._mark = (int(divisor), origin, advice)
        self._stack: Optional[list] = None

    def __enter__(self) -> None:
        stack = getattr(_local, "divisor", None)
        if stack is None:
            stack = _local.divisor = []
        stack.append(self._mark)
        self._stack = stack

    def __exit__(self, *exc) -> None:
        stack, self._stack = self._stack, None
        if stack:
            del stack[len(stack) - 1:]


def framework_window() -> Optional[tuple]:
    """Inside :func:`framework_divisor`: ``(divisor, origin, advice)`` of the innermost block; outside: None."""
    stack = getattr(_local, "divisor", None)
    return stack[-1] if stack else None
