"""Where in the user's code a call came from.

The watch's hooks run deep inside torch; a finding is only actionable if it
names the user's line (``train.py:42``), so we walk the stack outwards past
frames of torch and of gradguard itself. Frames of installed libraries
(Lightning, Accelerate, Transformers) are skipped too when a frame of the
user's own code is further out, so a finding inside ``trainer.fit()`` points
at the training step the user wrote rather than at Lightning's loop.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Dict, Optional, Tuple

import torch

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_GG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# gradguard's bundled demo is user code as far as findings are concerned.
_GG_USER_DIRS = (os.path.join(_GG_DIR, "demo") + os.sep,)
_LIB_DIRS = tuple(
    {p + os.sep for p in (sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")) if p}
) + ("site-packages" + os.sep, "dist-packages" + os.sep)
_STDLIB_DIR = (sysconfig.get_paths().get("stdlib") or "") + os.sep

# 0 = internal (torch, gradguard, runpy/contextlib...), 1 = library, 2 = user.
_kind_cache: Dict[str, int] = {}


def _kind(filename: str) -> int:
    kind = _kind_cache.get(filename)
    if kind is None:
        path = os.path.abspath(filename) if not filename.startswith("<") else filename
        if path.startswith(_TORCH_DIR):
            kind = 0
        elif path.startswith(_GG_DIR) and not path.startswith(_GG_USER_DIRS):
            kind = 0
        elif any(d in path for d in _LIB_DIRS):
            kind = 1
        elif _STDLIB_DIR != os.sep and path.startswith(_STDLIB_DIR):
            kind = 1
        else:
            kind = 2
        _kind_cache[filename] = kind
    return kind


Site = Tuple[Optional[str], Optional[int]]


def user_site(depth: int = 1) -> Site:
    """``(path, line)`` of the innermost user-code frame calling into here.

    Falls back to the innermost frame outside torch and gradguard when no
    user frame exists (a call made entirely inside a library), and to
    ``(None, None)`` when there is none at all.

    >>> path, line = user_site()
    >>> isinstance(line, int)
    True
    """
    frame = sys._getframe(depth)
    fallback: Site = (None, None)
    while frame is not None:
        filename = frame.f_code.co_filename
        kind = _kind(filename)
        if kind == 2:
            return filename, frame.f_lineno
        if kind == 1 and fallback[0] is None:
            fallback = (filename, frame.f_lineno)
        frame = frame.f_back
    return fallback
