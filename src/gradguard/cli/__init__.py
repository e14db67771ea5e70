"""The ``gradguard`` command line: ``main(argv) -> int`` (flake8's shape).

One module per subcommand; each exposes ``register(subparsers)``, which adds
its parser and sets ``handler`` to a function ``(args) -> int``. Subcommand
modules import heavy things (torch, matplotlib) inside their handlers only, so
``gradguard lint`` and ``gradguard rule`` start fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from .._errors import GradguardError

#: exit code for bad usage (argparse's own, and ours).
USAGE_ERROR = 2

_SUBCOMMANDS = ("demo", "run", "lint", "rule", "plan", "server")


def build_parser() -> argparse.ArgumentParser:
    from importlib import import_module

    parser = argparse.ArgumentParser(
        prog="gradguard",
        description="Own PyTorch's .grad accumulator: exact accumulation, a run-time watch and a linter.",
    )
    from .._version import __version__

    parser.add_argument("--version", action="version", version=f"gradguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMANDS:
        import_module(f".{name}", __name__).register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code (never calls sys.exit itself)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        code = int(args.handler(args) or 0)
        if not sys.stdout.closed:  # `gradguard server` closes it when the editor says exit
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except GradguardError as exc:
        print(f"gradguard {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:  # `gradguard lint src | head -1`: stop quietly, as other Unix tools do
        _silence_stdout()
        return 1


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


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's final flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file descriptor (captured output)
        pass
