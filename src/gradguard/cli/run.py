"""``gradguard run``: run an unmodified training script under :func:`gradguard.watch`, as ``python`` would."""

from __future__ import annotations

import argparse
import os
import sys

from .._errors import GradguardError
from ._paths import check_output_path

DESCRIPTION = """\
Runs SCRIPT as `python SCRIPT ARGS` would (or a module, as `python -m MODULE ARGS`, or a
folder holding __main__.py): same sys.argv, __main__, sys.path[0] and exit code, while
gradguard.watch looks at every optimizer, parameter and backward pass. Prints the findings
to stderr at the end. Exit code: 1 if any error-severity finding, else the script's own.

The whole program is watched: threads the script starts, multiprocessing child
processes (fork, spawn, forkserver; torch.multiprocessing.spawn; a raw os.fork()), and
the Python interpreters it starts with subprocess or os.exec* (a launcher that runs
`python train.py`; --no-subprocess turns that off). Each child with findings writes
FILE with .pidN before its suffix (findings.pid4242.json) and gets its own summary,
naming its pid (and a child Python's command); the exit code counts the children's
errors too. Findings are written as they are made, so a run killed or ended by
os._exit keeps what it found; SIGTERM, SIGHUP and Ctrl-C print the summary first and
end the run as they end python.

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
    p.add_argument("--no-subprocess", action="store_true",
                   help="do not watch the Python interpreters the script starts with subprocess or os.exec* "
                   "(by default they report into this run)")
    p.add_argument("-m", dest="module", metavar="MODULE", nargs=argparse.REMAINDER,
                   help="run a module as `python -m MODULE ARGS` does (everything after it goes to the module)")
    p.add_argument("script", metavar="SCRIPT", nargs="?", help="the Python script (or folder with __main__.py) to run")
    p.add_argument("args", metavar="ARGS", nargs=argparse.REMAINDER, help="arguments passed to the script")
    return p


_VALUE_OPTIONS = ("--mode", "--report", "--ignore")


def split_script_args(argv: list) -> tuple:
    """``(gradguard's own arguments, the script's)``: everything after SCRIPT (or ``-m MODULE``) is the script's, verbatim.

    argparse would drop a ``--`` the script should see; ``python`` passes it on.

    >>> split_script_args(["--report", "r.json", "train.py", "--", "--lr", "3"])
    (['--report', 'r.json', 'train.py'], ['--', '--lr', '3'])
    >>> split_script_args(["-m", "pkg.train", "--", "-x"])
    (['-m', 'pkg.train'], ['--', '-x'])
    """
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv[: i + 2], argv[i + 2 :]
        if arg == "-m":
            return argv[: i + 2], argv[i + 2 :]
        if arg.startswith("-"):
            takes_value = "=" not in arg and any(o.startswith(arg) for o in _VALUE_OPTIONS) and len(arg) > 2
            i += 2 if takes_value else 1
            continue
        return argv[: i + 1], argv[i + 1 :]
    return argv, []


class Killed(int):
    """The end of a run by a signal: ``-signum``, as ``subprocess`` shows it.

    :func:`gradguard.cli.main` called as the program (no ``argv``) ends the
    process by that signal, as python ends on an unhandled KeyboardInterrupt.
    """

    signum: int

    def __new__(cls, signum: int):
        self = super().__new__(cls, -signum)
        self.signum = signum
        return self


def _exit_code(code) -> int:
    """The process exit code Python would give for ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:
        print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    except Exception:  # noqa: BLE001 - a closed or broken stderr: python drops the message too
        pass
    return 1


def _flush_std_files(code: int) -> int:
    """Flush the script's ``sys.stdout`` and ``sys.stderr`` as python does at its end: 120 if that fails.

    A stream that failed is pointed at /dev/null, so the interpreter's own last
    flush does not fail (and say so) a second time.
    """
    failed = False
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception as exc:  # noqa: BLE001 - as python: "Exception ignored", exit status 120
            failed = True
            if name == "stdout":
                try:
                    sys.stderr.write(f"Exception ignored in: {stream!r}\n{type(exc).__name__}: {exc}\n")
                except Exception:  # noqa: BLE001
                    pass
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
            except Exception:  # noqa: BLE001 - not a real file descriptor
                pass
    return 120 if failed and not isinstance(code, Killed) else code


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
        name = args.module[0] if args.module else ""
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


def handle(args) -> int:
    import runpy
    import signal
    import tempfile
    import threading

    from .._errors import GradientBugError
    from ..findings import short_path
    from ..rules import parse_codes
    from . import _child_python, _whole_program

    _child_python.disable()  # started by a watched program: this run is a run of its own

    ignore = parse_codes(args.ignore)  # GradguardError -> one line and exit 2 in main()
    kind, target = _target(args)
    rank, world_size = _rank()
    # Absolute now: the script may change the current folder before the report is written.
    report = os.path.abspath(report_path(args.report, rank, world_size)) if args.report else None
    if report:
        check_output_path(report, "--report")  # before the run, not after hours of training
    who = f"gradguard run [rank {rank}/{world_size}]" if world_size > 1 else "gradguard run"

    saved_argv, saved_path, saved_main = sys.argv, list(sys.path), sys.modules["__main__"]
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
    started_in = os.getcwd()
    owner = os.getpid()
    config = _whole_program.Config(args.mode, tuple(sorted(ignore)), report,
                                   tempfile.mkdtemp(prefix="gradguard-run-"), who, started_in, owner,
                                   report_named=report == os.path.abspath(args.report) if report else True)
    saved_env = {}
    if not args.no_subprocess:
        hook = os.path.join(config.shared, "hook")
        _child_python.write_hook(hook)
        for key, value in _child_python.environment(config, hook).items():
            saved_env[key] = os.environ.get(key)
            os.environ[key] = value
    threads_before = set(threading.enumerate())
    run = _whole_program.install(config, parent=True)
    code = 0
    try:
        w = run.new_watch()
        run.watches[threading.get_ident()] = w
        try:
            with w:
                if kind == "module":
                    runpy.run_module(target, run_name="__main__", alter_sys=True)
                else:
                    _run_script(target, args.script)
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except GradientBugError as exc:
            where = exc.finding._replace(path=short_path(exc.finding.path, started_in)) if exc.finding.path \
                else exc.finding
            _whole_program._Stderr(run.stderr).write(
                f"{who}: stopped at {where.location()}: {exc.finding.code} {exc.finding.name}\n")
            code = 1
        except KeyboardInterrupt as exc:  # python prints it, then ends by SIGINT
            _report_crash(exc)
            code = Killed(signal.SIGINT)
        except BaseException as exc:  # the script crashed: show its traceback as python would
            _report_crash(exc)
            code = 1
        finally:
            sys.argv = saved_argv
            sys.path[:] = saved_path
            sys.modules["__main__"] = saved_main
            if args.no_progress:
                if saved_tqdm is None:
                    os.environ.pop("TQDM_DISABLE", None)
                else:
                    os.environ["TQDM_DISABLE"] = saved_tqdm
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        if os.getpid() != owner:
            # a child made by a raw os.fork() that ended by sys.exit() or an exception: a child like any
            # other (its findings to the run's folder), never the run's end
            _whole_program._child_ends()
            return code
        _whole_program.wait_for_the_program(threads_before)
        code = _flush_std_files(code)
        result = _whole_program.finish_parent(code)
        # ended by Ctrl-C: by SIGINT, findings or not, as SIGTERM and SIGHUP end it (the summary is printed)
        return code if isinstance(code, Killed) else result
    finally:
        _whole_program.uninstall()


def _run_script(path: str, typed: str) -> None:
    """Run the script at absolute ``path`` as ``python typed`` does: ``sys.argv[0]`` as typed, ``__file__`` absolute.

    ``runpy.run_path`` would set ``sys.argv[0]`` to the path it was given; a
    zip file or a folder with ``__main__.py`` still goes through it.
    """
    import builtins
    import io
    import runpy
    import types
    import zipfile
    from importlib.machinery import SourceFileLoader

    if os.path.isdir(path) or zipfile.is_zipfile(path):
        sys.argv[0] = path
        runpy.run_path(path, run_name="__main__")
        return
    with io.open_code(path) as fh:
        source = fh.read()
    code = compile(source, path, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=path, __loader__=SourceFileLoader("__main__", path), __builtins__=builtins,
                           __cached__=None, __package__=None, __spec__=None)
    sys.modules["__main__"] = module  # multiprocessing's spawn finds the script through it
    exec(code, module.__dict__)


def _report_crash(exc: BaseException) -> None:
    """What python does with an exception that ends the script: its ``sys.excepthook``, or the traceback."""
    try:
        if sys.excepthook is not sys.__excepthook__:  # the script installed its own
            sys.excepthook(type(exc), exc, exc.__traceback__)
        else:
            print_user_traceback(exc)
    except Exception:  # noqa: BLE001 - a closed or broken stderr: python loses the traceback too
        pass


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
