"""Output paths of the subcommands, checked before any work starts."""

from __future__ import annotations

import os

from .._errors import GradguardError


def check_output_path(path: str, flag: str, *, folder: bool = False) -> None:
    """Refuse an output path that cannot be written, before any work starts.

    ``folder``: the path is a folder to create (``demo --out``), else a file
    (its folder must exist). Raises :class:`GradguardError` (one line, exit 2).
    """
    import stat

    shown = f"{flag} {path}"
    if not path:
        raise GradguardError(f"{flag} needs a path")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise GradguardError(f"{shown}: cannot use it: {exc.strerror}") from None
    if mode is not None:
        if stat.S_ISDIR(mode) != folder:
            kind = "a folder" if stat.S_ISDIR(mode) else "a file"
            raise GradguardError(f"{shown}: is {kind}; give a {'folder' if folder else 'file'} path")
        if not os.access(path, os.W_OK):
            raise GradguardError(f"{shown}: not writable")
        return
    parent = os.path.dirname(os.path.abspath(path))
    # the nearest existing folder above: demo --out creates the missing ones, a file needs its own folder
    existing = parent
    while folder and not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = "does not exist" if not os.path.exists(existing) else "is not a folder"
        raise GradguardError(f"{shown}: the folder {existing} {what}; create it first or choose another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise GradguardError(f"{shown}: cannot write in the folder {existing}")
