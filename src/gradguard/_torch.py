"""torch for the run-time parts, with one clear line when it is missing.

torch is not a hard dependency of the distribution (the linter, the language server and the
pre-commit hooks never import it, so they install in seconds); the Accumulator, the watch and
``gradguard run``/``demo``/``plan`` use the torch the user already has. This module says, in
one line, what to do when there is none or it is too old.
"""

from __future__ import annotations

import re

from ._errors import GradguardError

#: The oldest torch the run-time parts support (the ``torch`` extra asks for it).
MIN_TORCH = (2, 1)
INSTALL = "install the PyTorch build for your machine (https://pytorch.org/get-started/locally/)"


def _install() -> str:
    """What to do, with a command (the ``torch`` extra's requirement; not ``gradguard[torch]``: gradguard is
    not on a package index)."""
    from ._extras import install_hint

    return f"{INSTALL}, e.g. {install_hint('torch')}"


def missing_message(what: str) -> str:
    """``what`` needs torch, which is not installed: the line to show.

    >>> missing_message("gradguard run")[:60]
    'gradguard run needs PyTorch (torch>=2.1), which is not insta'
    """
    return (f"{what} needs PyTorch (torch>={'.'.join(map(str, MIN_TORCH))}), which is not installed: {_install()}; "
            f"gradguard lint and gradguard server work without it")


def is_missing_torch(exc: BaseException) -> bool:
    """Whether ``exc`` is the ModuleNotFoundError of an absent torch (not of a module torch itself lacks)."""
    return isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "torch"


def missing_error(what: str) -> ModuleNotFoundError:
    """The error the Python API raises for ``what`` without torch: still a ModuleNotFoundError of torch."""
    return ModuleNotFoundError(missing_message(what), name="torch")


def _version(text: str) -> tuple:
    """``"2.13.0+cpu"`` -> ``(2, 13)``.

    >>> _version("2.13.0+cpu"), _version("1.13.1"), _version("2.1.0a0+git1234")
    ((2, 13), (1, 13), (2, 1))
    """
    return tuple(int(p) for p in re.findall(r"\d+", str(text).split("+")[0])[:2])


def require_torch(what: str):
    """torch, or :class:`GradguardError` with one line saying what to install.

    Raises:
        GradguardError: torch is missing, cannot be imported, or older than :data:`MIN_TORCH`.
    """
    try:
        import torch
    except (ImportError, OSError) as exc:
        if is_missing_torch(exc):
            raise GradguardError(missing_message(what)) from None
        # a broken install: a missing shared library, a half-removed package
        raise GradguardError(f"{what} needs PyTorch, and importing it failed: {exc}") from None
    found = getattr(torch, "__version__", "0")
    if _version(found) < MIN_TORCH:
        raise GradguardError(f"{what} needs torch>={'.'.join(map(str, MIN_TORCH))}, found torch {found}: {_install()}")
    return torch
