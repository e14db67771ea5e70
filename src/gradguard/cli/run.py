"""``gradguard run``: run an unmodified training script under :func:`gradguard.watch`, as ``python`` would."""

from __future__ import annotations

import argparse
import os
import sys

from .._errors import GradguardError
from . import check_output_path

DESCRIPTION = """\
Runs SCRIPT as `python SCRIPT ARGS` would (or a module, as `python -m MODULE ARGS`, or a
folder holding __main__.py): same sys.argv, __main__, sys.path[0] and exit code, while
gradguard.watch looks at every optimizer, parameter and backward pass. Prints the findings
to stderr at the end. Exit code: 1 if any error-severity finding, else the script's own.

Under torchrun every rank runs the watch: rank 0 writes --report FILE, rank N writes
FILE with .rankN before its suffix (findings.rank1.json), and each summary names its rank.

examples:
  gradguard run --mode raise --report findings.json train.py --epochs 1
  gradguard run -m mypackage.train --epochs 1
  torchrun --nproc_per_node 2 --no-python gradguard run --report findings.json train.py
"""


def register(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a training script under the run-time watch, like `python SCRIPT ARGS`",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="gradguard run [options] (SCRIPT | -m MODULE) [ARGS ...]",
    )
    p.add_argument(
        "--mode",
        choices=("warn", "raise", "record"),
        default="warn",
        help="warn: a GradientBugWarning at each finding (default); raise: stop the script at the first one; "
        "record: only the summary at the end",
    )
    p.add_argument("--report", metavar="FILE", help="write the findings as a JSON array to FILE")
    p.add_argument(
        "--ignore", metavar="CODES", default="", help="comma-separated rule codes or prefixes to skip, e.g. GG107,GG109"
    )
    p.add_argument("--no-progress", action="store_true",
                   help="turn off tqdm progress bars in the script (sets TQDM_DISABLE=1), e.g. for CI logs")
    p.add_argument("-m", dest="module", metavar="MODULE", nargs=argparse.REMAINDER,
                   help="run a module as `python -m MODULE ARGS` does (everything after it goes to the module)")
    p.add_argument("script", metavar="SCRIPT", nargs="?", help="the Python script (or folder with __main__.py) to run")
    p.add_argument("args", metavar="ARGS", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(handler=_handle)


def _exit_code(code) -> int:
    """The process exit code Python would give for ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


def _rank() -> tuple:
    """``(rank, world_size)`` under torchrun (its environment variables), else ``(0, 1)``."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def report_path(path: str, rank: int, world_size: int) -> str:
    """Rank 0 (or a single process) writes ``path``; rank N writes ``path`` with ``.rankN`` before its suffix.

    >>> report_path("out/findings.json", 0, 2), report_path("out/findings.json", 1, 2), report_path("r", 3, 4)
    ('out/findings.json', 'out/findings.rank1.json', 'r.rank3')
    """
    if world_size <= 1 or rank == 0:
        return path
    stem, suffix = os.path.splitext(path)
    return f"{stem}.rank{rank}{suffix}"


def _target(args) -> tuple:
    """``(kind, what)``: ``("module", name)`` or ``("path", absolute path)``; usage errors raise."""
    if args.module is not None:
        if args.script is not None:  # `SCRIPT -m MODULE` cannot reach here: REMAINDER took it all
            raise GradguardError("give a script or -m MODULE, not both")
        name, args.args = (args.module[0], args.module[1:]) if args.module else ("", [])
        if not name:
            raise GradguardError("-m needs a module name, e.g. -m mypackage.train")
        import importlib.util

        sys.path.insert(0, os.getcwd())  # where `python -m` looks first
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError) as exc:
            raise GradguardError(f"cannot find module {name!r}: {exc}") from None
        finally:
            sys.path.pop(0)
        if spec is None:
            raise GradguardError(f"no module named {name!r} (looked in the current folder and on sys.path)")
        return "module", name
    if args.script is None:
        raise GradguardError("a script is required: gradguard run [options] (SCRIPT | -m MODULE) [ARGS ...]")
    script = args.script
    if os.path.isdir(script):
        if not os.path.isfile(os.path.join(script, "__main__.py")):
            raise GradguardError(f"{script!r} is a folder without __main__.py: give a script, or a folder that has one")
    elif not os.path.isfile(script):
        raise GradguardError(f"no such script: {script!r}")
    return "path", os.path.abspath(script)  # python prints the script's frames with absolute paths


def _handle(args) -> int:
    import runpy

    from .._errors import GradientBugError
    from ..findings import summary_line
    from ..rules import parse_codes

    ignore = parse_codes(args.ignore)  # GradguardError -> one line and exit 2 in main()
    kind, target = _target(args)
    rank, world_size = _rank()
    report = report_path(args.report, rank, world_size) if args.report else None
    if report:
        check_output_path(report, "--report")  # before the run, not after hours of training
    who = f"gradguard run [rank {rank}/{world_size}]" if world_size > 1 else "gradguard run"

    from ..watcher import watch

    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_tqdm = os.environ.get("TQDM_DISABLE")
    if args.no_progress:
        os.environ["TQDM_DISABLE"] = "1"
    # `python SCRIPT` puts the script's folder first on sys.path; `python -m` the current folder.
    first = os.getcwd() if kind == "module" else (target if os.path.isdir(target) else os.path.dirname(target))
    if sys.path:
        sys.path[0] = first
    else:
        sys.path.insert(0, first)
    sys.argv = [args.script if kind == "path" else target, *args.args]
    w = watch(mode=args.mode, ignore=ignore)
    code = 0
    try:
        with w:
            if kind == "module":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except GradientBugError as exc:
        print(f"{who}: stopped at {exc.finding.location()}: {exc.finding.code} {exc.finding.name}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt as exc:
        print_user_traceback(exc)
        code = 130
    except BaseException as exc:  # the script crashed: show its traceback as python would
        print_user_traceback(exc)
        code = 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if args.no_progress:
            if saved_tqdm is None:
                os.environ.pop("TQDM_DISABLE", None)
            else:
                os.environ["TQDM_DISABLE"] = saved_tqdm

    findings = w.findings
    if report:
        _write_report(findings, report, who)
    if findings:
        print(f"\n{who}: findings", file=sys.stderr)
        for f in findings:
            print(f.format(), file=sys.stderr)
        print(f"`gradguard rule {findings[0].code}` explains a rule and its fix"
              + (f"; {report} has the full messages" if report else ""), file=sys.stderr)
    print(f"{who}: {summary_line(findings)}", file=sys.stderr)
    if any(f.severity == "error" for f in findings):
        return 1
    return code


def _write_report(findings, path: str, who: str) -> None:
    """Write the JSON report; if that fails now (a full disk), the findings still reach stderr."""
    from ..findings import to_json

    text = to_json(findings) + "\n"
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        print(f"{who}: error: could not write the report to {path}: {exc.strerror or exc}; "
              "the findings as JSON follow", file=sys.stderr)
        sys.stderr.write(text)


def _is_ours(filename: str) -> bool:
    """Frames of gradguard itself and of runpy: not the user's code."""
    import runpy

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    return path.startswith(here) or path == os.path.abspath(runpy.__file__) or filename == "<frozen runpy>"


def print_user_traceback(exc: BaseException) -> None:
    """The traceback python would print for the user's script: without gradguard's and runpy's frames.

    Demo code shipped inside gradguard counts as the user's when it is what was run.
    """
    import traceback

    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    seen = set()
    stack = [te]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        frames = [f for f in t.stack if not _is_ours(f.filename) or "/demo/" in f.filename.replace(os.sep, "/")]
        t.stack = traceback.StackSummary.from_list(frames)
        stack.extend(x for x in (t.__cause__, t.__context__) if x is not None)
    sys.stderr.write("".join(te.format()))
