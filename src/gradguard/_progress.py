"""Progress bars for anything that runs long: tqdm when installed, a plain counter otherwise."""

from __future__ import annotations

import sys
from typing import Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")


def progress(iterable: Iterable[T], *, desc: str, total: Optional[int] = None, disable: bool = False) -> Iterator[T]:
    """Iterate with a progress bar on stderr (tqdm if importable; it is an optional extra)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # the core depends on torch alone
        return _plain(iterable, desc, total, disable)
    return iter(tqdm(iterable, desc=desc, total=total, disable=disable, leave=False, dynamic_ncols=True))


def _plain(iterable: Iterable[T], desc: str, total: Optional[int], disable: bool) -> Iterator[T]:
    total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
    every = max(1, (total or 100) // 20)
    for i, item in enumerate(iterable, 1):
        yield item
        if not disable and (i % every == 0 or i == total):
            print(f"\r{desc}: {i}/{total or '?'}", end="" if i != total else "\n", file=sys.stderr, flush=True)
