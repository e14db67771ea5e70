"""The ``gradguard`` command line: ``main(argv) -> int`` (flake8's shape).

One module per subcommand; each has ``register(subparsers)``, which adds its
parser and returns it, and ``handle(args) -> int``, which runs it. Subcommand
modules import heavy things (torch, matplotlib) inside ``handle`` only, so
``gradguard lint`` and ``gradguard rule`` start fast.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import Optional, Sequence

from .._errors import GradguardError
from . import demo, lint, plan, rule, run, server

#: exit code for bad usage (argparse's own, and ours).
USAGE_ERROR = 2

SUBCOMMANDS = {"demo": demo, "run": run, "lint": lint, "rule": rule, "plan": plan, "server": server}
#: The subcommands that run PyTorch code; without torch they say so in one line (torch is not a
#: hard dependency: `lint`, `rule` and `server` never import it).
NEEDS_TORCH = ("demo", "run", "plan")


def build_parser() -> tuple:
    """``(the top-level parser, {command: its parser})``."""
    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="gradguard",
        description="Own PyTorch's .grad accumulator: exact accumulation, a run-time watch and a linter.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"gradguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parsers = {name: module.register(sub) for name, module in SUBCOMMANDS.items()}
    return parser, parsers


def _unknown_flags(extra: list, command_parser: argparse.ArgumentParser) -> str:
    """The usage error for arguments the subcommand does not know, with the closest flag it has."""
    flags = [o for action in command_parser._actions for o in action.option_strings]
    first = extra[0]
    close = difflib.get_close_matches(first.split("=", 1)[0], flags, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close and first.startswith("-") else ""
    return f"unrecognized argument{'s' if len(extra) > 1 else ''}: {' '.join(extra)}{hint}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code (never calls sys.exit itself)."""
    parser, parsers = build_parser()
    as_program = argv is None  # the process's own entry point: it may end the process by a signal
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args = None
    if argv[:1] == ["run"]:  # the script's arguments pass through untouched, as python passes them
        from .run import split_script_args

        own, script_args = split_script_args(argv[1:])
        argv = ["run", *own]
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # said by the subcommand, with its usage and the flag meant, not by the top-level parser
            command_parser = parsers.get(getattr(args, "command", None), parser)
            command_parser.error(_unknown_flags(extra, command_parser))
        if script_args is not None:
            args.args = script_args
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        if args.command in NEEDS_TORCH:
            from .._torch import require_torch

            require_torch(f"gradguard {args.command}")
        code = SUBCOMMANDS[args.command].handle(args) or 0
        code = code if isinstance(code, int) else int(code)  # keeps run.Killed
        if sys.stdout is not None and not sys.stdout.closed:  # `gradguard server` closes it when the editor says exit
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        if as_program and isinstance(code, run.Killed):  # as python ends on an unhandled KeyboardInterrupt
            from ._whole_program import die_by_signal

            die_by_signal(code.signum)
        return code
    except GradguardError as exc:
        print(f"gradguard {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:  # `gradguard lint src | head -1`: stop quietly, as other Unix tools do
        _silence_stdout()
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's final flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file descriptor (captured output)
        pass
