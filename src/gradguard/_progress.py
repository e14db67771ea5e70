"""Progress for anything that runs long: the one place that decides how it is shown.

* On a terminal: a tqdm bar when tqdm is installed (an optional extra), else a
  counter redrawn in place; either appears only once the work has run a moment,
  so quick work shows nothing.
* Written to a file or a pipe (CI logs, pre-commit): no ``\\r`` redraws, only a
  plain line now and then (every ``_EVERY_S`` seconds) and one at the end, and
  nothing at all for work that ends within that time.
* ``disable=True`` (every command's ``--no-progress``): nothing.
"""

from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, Optional, TextIO, TypeVar

T = TypeVar("T")

#: seconds before anything is shown, and between two plain lines in a log
_DELAY_S = 0.5
_EVERY_S = 10.0


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def progress(
    iterable: Iterable[T],
    *,
    desc: str,
    total: Optional[int] = None,
    disable: bool = False,
    stream: Optional[TextIO] = None,
) -> Iterator[T]:
    """Iterate over ``iterable`` showing progress on ``stream`` (default: stderr)."""
    stream = stream if stream is not None else sys.stderr
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    if disable:
        return iter(iterable)
    if not _is_terminal(stream):
        return _log_lines(iterable, desc, total, stream)
    try:
        from tqdm.auto import tqdm
    except ImportError:  # the core depends on torch alone
        return _counter(iterable, desc, total, stream)
    options = dict(desc=desc, total=total, leave=False, dynamic_ncols=True, file=stream)
    try:
        return iter(tqdm(iterable, delay=_DELAY_S, **options))
    except TypeError:  # tqdm older than 4.66 has no delay
        return iter(tqdm(iterable, **options))


def _count(i: int, total: Optional[int]) -> str:
    return f"{i}/{total}" if total else str(i)


def _counter(iterable: Iterable[T], desc: str, total: Optional[int], stream: TextIO) -> Iterator[T]:
    """A counter redrawn in place on a terminal (no tqdm)."""
    start = time.monotonic()
    shown = False
    i = 0
    for i, item in enumerate(iterable, 1):
        yield item
        if time.monotonic() - start >= _DELAY_S:
            print(f"\r{desc}: {_count(i, total)}", end="", file=stream, flush=True)
            shown = True
    if shown:
        print(f"\r{desc}: {_count(i, total)}", file=stream, flush=True)


def _log_lines(iterable: Iterable[T], desc: str, total: Optional[int], stream: TextIO) -> Iterator[T]:
    """A few plain lines for a log: one every ``_EVERY_S`` seconds, one at the end if any was written."""
    start = last = time.monotonic()
    shown = False
    i = 0
    for i, item in enumerate(iterable, 1):
        yield item
        now = time.monotonic()
        if now - last >= _EVERY_S:
            print(f"{desc}: {_count(i, total)} ({now - start:.0f} s)", file=stream, flush=True)
            last, shown = now, True
    if shown:
        print(f"{desc}: {_count(i, total)} done ({time.monotonic() - start:.0f} s)", file=stream, flush=True)
