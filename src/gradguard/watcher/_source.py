"""Where in the user's code a call came from.

The watch's hooks run deep inside torch; a finding is only actionable if it
names the user's line (``train.py:42``), so we walk the stack outwards past
frames of torch and of gradguard itself. Whose code a frame is comes from
where the run started, not from folder names: the script being run and the
working tree are the user's; anything else (installed packages wherever they
live: ``site-packages``, ``pip install --target``, a folder of vendored
packages put on ``sys.path``) is a library, skipped when a frame of the user's
own code is further out, so that a finding inside ``trainer.fit()`` points at
the training step the user wrote rather than at Lightning's loop.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Dict, Optional, Tuple

import torch

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_GG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# gradguard's bundled demo is user code as far as findings are concerned.
_GG_USER_DIR = os.path.join(_GG_DIR, "demo") + os.sep

Site = Tuple[Optional[str], Optional[int]]
INTERNAL, LIBRARY, USER = 0, 1, 2


def _dir(path: Optional[str]) -> Optional[str]:
    return os.path.join(os.path.abspath(path), "") if path else None


def _holds_installed_packages(folder: str) -> bool:
    try:
        return any(name.endswith((".dist-info", ".egg-info")) for name in os.listdir(folder))
    except OSError:
        return False


def _install_dirs() -> Tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    dirs |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return tuple(sorted({_dir(d) for d in dirs if d}))


class Source:
    """Decides whose code a file is, for the run in progress.

    ``script``: the file being run (default: ``sys.argv[0]`` or ``__main__``'s
    file, when it is a file outside the Python installation).
    """

    def __init__(self, script: Optional[str] = None, cwd: Optional[str] = None):
        install = _install_dirs()
        if script is None:
            main = sys.modules.get("__main__")
            for candidate in (sys.argv[0] if sys.argv else None, getattr(main, "__file__", None)):
                if candidate and os.path.isfile(candidate):
                    script = candidate
                    break
        self.script_dir = _dir(os.path.dirname(os.path.abspath(script))) if script else None
        if self.script_dir and self.script_dir.startswith(install):
            self.script_dir = None  # a tool's entry point (pytest, a console script), not the user's script
        self.cwd = _dir(cwd or os.getcwd())
        roots = {d for d in (self.script_dir, self.cwd) if d}
        # A folder put on sys.path inside the working tree holds libraries when something
        # was installed into it (pip install --target ./libs leaves *.dist-info there);
        # a src/ layout or the tests folder pytest puts on sys.path is the user's own code.
        self.lib_dirs = tuple(sorted(
            d for d in {_dir(p) for p in sys.path if p}
            if d and d not in roots and d.startswith(tuple(roots)) and _holds_installed_packages(d)
        ))
        self.install = install
        self._cache: Dict[str, int] = {}

    def kind(self, filename: str) -> int:
        kind = self._cache.get(filename)
        if kind is None:
            kind = self._cache[filename] = self._kind(filename)
        return kind

    def _kind(self, filename: str) -> int:
        if filename.startswith("<"):
            return INTERNAL if filename.startswith("<frozen") else USER  # exec'd code, doctests, the REPL
        path = os.path.abspath(filename)
        if path.startswith(_TORCH_DIR):
            return INTERNAL
        if path.startswith(_GG_DIR):
            return USER if path.startswith(_GG_USER_DIR) else INTERNAL
        if path.startswith(self.lib_dirs):
            return LIBRARY
        if self.script_dir and path.startswith(self.script_dir):
            return USER
        if self.cwd and path.startswith(self.cwd) and not (path.startswith(self.install) and not self.cwd.startswith(self.install)):
            return USER
        return LIBRARY

    def site(self, depth: int = 1) -> Site:
        """``(path, line)`` of the innermost user-code frame calling into here.

        Falls back to the innermost frame outside torch and gradguard when no
        user frame exists (a call made entirely inside a library), and to
        ``(None, None)`` when there is none at all.

        >>> path, line = Source().site()
        >>> isinstance(line, int)
        True
        """
        frame = sys._getframe(depth)
        fallback: Site = (None, None)
        kind = self.kind
        while frame is not None:
            filename = frame.f_code.co_filename
            k = kind(filename)
            if k == USER:
                return filename, frame.f_lineno
            if k == LIBRARY and fallback[0] is None:
                fallback = (filename, frame.f_lineno)
            frame = frame.f_back
        return fallback

    def call(self, depth: int = 1) -> Tuple[Site, bool]:
        """:meth:`site`, and whether the call reached here through a library's code (a framework's
        ``backward``, such as ``accelerator.backward`` or Lightning's loop, rather than the user's own call)."""
        frame = sys._getframe(depth)
        fallback: Site = (None, None)
        kind = self.kind
        through = False
        while frame is not None:
            filename = frame.f_code.co_filename
            k = kind(filename)
            if k == USER:
                return (filename, frame.f_lineno), through
            if k == LIBRARY:
                through = True
                if fallback[0] is None:
                    fallback = (filename, frame.f_lineno)
            frame = frame.f_back
        return fallback, through

    def called_by_gradguard(self, depth: int = 1) -> bool:
        """Whether the innermost frame outside torch (and this package) is gradguard's own code."""
        frame = sys._getframe(depth)
        here = os.path.dirname(os.path.abspath(__file__)) + os.sep
        while frame is not None:
            path = frame.f_code.co_filename
            if not path.startswith(_TORCH_DIR) and not path.startswith(here) and "contextlib" not in path:
                return path.startswith(_GG_DIR) and not path.startswith(_GG_USER_DIR)
            frame = frame.f_back
        return False
