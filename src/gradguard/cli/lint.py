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
    p.set_defaults(handler=handler)


def handler(args) -> int:
    from ..findings import summary_line, to_json, to_sarif
    from ..lint import find_config, lint_paths
    from ..lint._config import merge as merge_config

    paths = args.paths or ["."]
    config = None if args.no_config else find_config(paths)
    # unknown codes are a usage error before any file is read
    select, ignore = merge_config(config, args.select, args.ignore)
    skipped: list = []
    findings = lint_paths(paths, select=select, ignore=ignore, skipped=skipped)
    # a file only a newer Python parses is always worth a word; skipped loops on request
    for s in skipped:
        if args.show_skipped or "syntax of Python" in s.reason:
            sys.stderr.write(f"warning: {s.format()}\n")
    out = sys.stdout
    if args.format == "json":
        out.write(to_json(findings) + "\n")
    elif args.format == "sarif":
        out.write(json.dumps(to_sarif(findings), indent=2) + "\n")
    else:
        for f in findings:
            out.write(f.format() + "\n")
        out.write(summary_line(findings) + "\n")
    return 1 if findings else 0
