"""``gradguard run``: run an unmodified training script under :func:`gradguard.watch`."""

from __future__ import annotations

import argparse
import os
import sys

from . import USAGE_ERROR


def register(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a training script under the run-time watch, like `python SCRIPT ARGS`",
        description=(
            "Runs SCRIPT as `python SCRIPT ARGS` would (same sys.argv, __main__, sys.path[0] and exit code) "
            "while gradguard.watch looks at every optimizer, parameter and backward pass. Prints the findings "
            "to stderr at the end. Exit code: 1 if any error-severity finding, else the script's own.\n\n"
            "example: gradguard run --mode raise --report findings.json train.py --epochs 1"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.add_argument("script", metavar="SCRIPT", help="the Python script to run")
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


def _handle(args) -> int:
    import runpy
    import traceback

    from .._errors import GradientBugError
    from ..findings import summary_line, to_json
    from ..rules import parse_codes

    ignore = parse_codes(args.ignore)  # GradguardError -> usage error in main()
    script = args.script
    if not os.path.isfile(script):
        print(
            f"gradguard run: error: no such script: {script!r} (usage: gradguard run [options] SCRIPT [ARGS...])",
            file=sys.stderr,
        )
        return USAGE_ERROR
    from ..watcher import watch

    saved_argv, saved_path0 = sys.argv, (sys.path[0] if sys.path else None)
    sys.argv = [script, *args.args]
    # `python SCRIPT` puts the script's folder first on sys.path, so its sibling modules import.
    script_dir = os.path.dirname(os.path.abspath(script))
    if sys.path:
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)
    w = watch(mode=args.mode, ignore=ignore)
    code = 0
    try:
        with w:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except GradientBugError as exc:
        print(f"gradguard run: stopped at {exc.finding.location()}: {exc.finding.code} {exc.finding.name}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:  # the script crashed: show its traceback as python would
        traceback.print_exc()
        code = 1
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0

    findings = w.findings
    if args.report:
        with open(args.report, "w", encoding="utf-8") as fh:
            fh.write(to_json(findings) + "\n")
    if findings:
        print("\ngradguard run: findings", file=sys.stderr)
        for f in findings:
            extra = f" [step {f.step}]" if f.step is not None else ""
            print(f"{f.format()}{extra}", file=sys.stderr)
    print(f"gradguard run: {summary_line(findings)}", file=sys.stderr)
    if any(f.severity == "error" for f in findings):
        return 1
    return code
