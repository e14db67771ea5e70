"""``gradguard lint``: the static checker on files and folders.

Output is ruff's: one ``path:line:col: CODE message`` line per finding and a
summary, or ``--format json`` (SPEC §3) or ``--format sarif`` (SARIF 2.1.0 for
code-scanning upload). Exit codes: 0 clean, 1 findings, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys

EXAMPLES = """\
examples:
  gradguard lint train.py                      check one script
  gradguard lint src/ --select GG1 --ignore GG107
  gradguard lint . --format sarif > gradguard.sarif
  gradguard rule GG101                         explain a finding
  gradguard lint train.py --fix                repair what has a safe fix, report the rest
  gradguard lint src/ --diff                   show the fixes without writing

Silence one line with `# gradguard: ignore[GG101]` (or a bare `# gradguard: ignore`).
Defaults come from [tool.gradguard] select/ignore in the nearest pyproject.toml.
Command-line flags win: --select replaces the configured select and --ignore the
configured ignore; a code asked for with --select is reported even if the
configuration ignores it (or a prefix of it).
"""


def register(sub) -> None:
    p = sub.add_parser(
        "lint",
        help="find gradient-buffer bugs in training code before it runs",
        description="Check Python files and folders for gradient-buffer bugs (SPEC rules GG1xx, GG201, GG000).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders to check (default: the current folder)")
    p.add_argument("--format", choices=("text", "json", "sarif"), default="text", help="output format (default: text)")
    p.add_argument("--select", metavar="CODES", help="comma-separated codes or prefixes to report, e.g. GG101,GG2")
    p.add_argument("--ignore", metavar="CODES", help="comma-separated codes or prefixes not to report")
    p.add_argument("--no-config", action="store_true", help="do not read [tool.gradguard] from pyproject.toml")
    p.add_argument(
        "--show-skipped", action="store_true", help="also list the loops the analysis could not follow, with the reason (on stderr)"
    )
    p.add_argument("--fix", action="store_true", help="apply the safe fixes, then report what remains")
    p.add_argument("--unsafe-fixes", action="store_true", help="with --fix/--diff/--fix-only: also apply fixes that change the numbers (e.g. reweighting micro-batches)")
    p.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
    p.add_argument("--fix-only", action="store_true", help="apply the fixes and report only how many; exit 0 unless a file could not be fixed")
    p.set_defaults(handler=handler)


def handler(args) -> int:
    from ..lint import find_config, lint_paths
    from ..lint._config import merge as merge_config

    paths = args.paths or ["."]
    config = None if args.no_config else find_config(paths)
    # unknown codes are a usage error before any file is read
    select, ignore = merge_config(config, args.select, args.ignore)
    if args.fix or args.diff or args.fix_only:
        return _fix_handler(args, paths, select, ignore)
    skipped: list = []
    findings = lint_paths(paths, select=select, ignore=ignore, skipped=skipped)
    # a file only a newer Python parses is always worth a word; skipped loops on request
    for s in skipped:
        if args.show_skipped or "syntax of Python" in s.reason:
            sys.stderr.write(f"warning: {s.format()}\n")
    return _report(args, findings)


def _report(args, findings) -> int:
    from ..findings import summary_line, to_json, to_sarif

    out = sys.stdout
    if args.format in ("json", "sarif"):
        from ..lint.fix import with_fixes

        findings = with_fixes(findings)
    if args.format == "json":
        out.write(to_json(findings) + "\n")
    elif args.format == "sarif":
        out.write(json.dumps(to_sarif(findings), indent=2) + "\n")
    else:
        for f in findings:
            out.write(f.format() + "\n")
        out.write(summary_line(findings) + "\n")
    return 1 if findings else 0


def _fix_handler(args, paths, select, ignore) -> int:
    """``--fix``, ``--diff``, ``--fix-only``: repair files (or show how), then report what remains."""
    from ..lint import iter_python_files
    from ..lint.fix import fix_file, fix_source, unified_diff

    write = not args.diff
    if paths == ["-"]:  # stdin in, fixed source (or its diff) out
        text = sys.stdin.read()
        result = fix_source(text, "-", select=select, ignore=ignore, unsafe=args.unsafe_fixes)
        sys.stdout.write(unified_diff("-", text, result.text) if args.diff else result.text)
        return 1 if args.diff and result.text != text else 0
    fixed, remaining, failed = 0, [], 0
    for path in iter_python_files(paths):
        done = fix_file(path, select=select, ignore=ignore, unsafe=args.unsafe_fixes, write=write)
        if done.result.error:
            failed += 1
            print(f"gradguard lint: {path}: {done.result.error}", file=sys.stderr)
        if args.diff and done.result.text != done.original:
            sys.stdout.write(unified_diff(path, done.original, done.result.text))
        fixed += len(done.result.fixed)
        remaining += done.result.remaining
    noun = "finding" if fixed == 1 else "findings"
    if args.diff:
        print(f"Would fix {fixed} {noun}.", file=sys.stderr)
        return 1 if fixed else 0
    if args.fix_only:
        print(f"Fixed {fixed} {noun}.")
        return 1 if failed else 0
    print(f"Fixed {fixed} {noun}.", file=sys.stderr if args.format != "text" else sys.stdout)
    return max(_report(args, remaining), 1 if failed else 0)
