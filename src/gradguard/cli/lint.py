"""``gradguard lint``: the static checker on files, folders and standard input.

Output follows ruff: one short ``path:line:col: CODE what happened`` line per
finding and a summary (``--output-format full``: the whole message with its
consequence and fix), ``--statistics`` (counts per code), ``json``, ``sarif``
(SARIF 2.1.0 for code-scanning upload) or ``github`` (workflow annotations).
Paths are shown as ruff shows them: normalised (``train.py``, never
``./train.py``). Exit codes: see ``EXAMPLES`` (the help) and :func:`_exit_code`. Flags are added in
:func:`register`, one ``add_argument`` each, in the group they belong to.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .._errors import GradguardError

EXAMPLES = """\
examples:
  gradguard lint train.py                      check one script
  gradguard lint src/ --select GG1 --ignore GG107
  gradguard lint . --statistics                how many of each
  gradguard lint . --format sarif > gradguard.sarif
  cat train.py | gradguard lint - --stdin-filename train.py
  gradguard rule GG101                         what a finding means and how to fix it
  gradguard lint train.py --fix                repair what has a safe fix, report the rest
  gradguard lint src/ --diff                   show the fixes without writing

exit codes:
  0  no findings
  1  findings, whatever their severity, as ruff and flake8 do (with --fix: one left unfixed,
     or a file not fixed); an info rule such as GG107 that should not fail a build: --ignore it
     (or ignore = ["GG107"] in [tool.gradguard]), or --exit-zero
  2  a usage error (an unknown flag, rule code or path), with one line on stderr
  --exit-zero: 0 even with findings (2 still for usage errors)

Silence one line with `# gradguard: ignore[GG101]` (or a bare `# gradguard: ignore`).
Defaults come from [tool.gradguard] (select, ignore, exclude, extend-exclude) in the
nearest pyproject.toml. Command-line flags win: --select replaces the configured
select, --ignore the configured ignore and --exclude the configured exclude; a code
asked for with --select is reported even if the configuration ignores it (or a
prefix of it).
"""

FORMATS = ("concise", "full", "text", "json", "sarif", "github")



def _rule_list() -> str:
    """The rules, one line each, for the help's epilog (the catalogue is the source, so none is missing)."""
    from ..rules import RULES

    rows = [f"  {r.code}  {r.name:<28} {r.severity}" for r in RULES.values() if r.static]
    return "rules (`gradguard rule CODE` explains one):\n" + "\n".join(rows) + "\n"



def _globs(text: str) -> list:
    return [g.strip() for g in text.split(",") if g.strip()]


def register(sub) -> None:
    p = sub.add_parser(
        "lint",
        help="find gradient-buffer bugs in training code before it runs",
        description="Check Python files and folders for gradient-buffer bugs (the rules listed below).",
        epilog=EXAMPLES + "\n" + _rule_list(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="files or folders to check, or - for standard input (default: the current folder)")

    rules = p.add_argument_group("rules")
    rules.add_argument("--select", metavar="CODES", help="comma-separated codes or prefixes to report, e.g. GG101,GG2")
    rules.add_argument("--ignore", metavar="CODES", help="comma-separated codes or prefixes not to report")

    files = p.add_argument_group("files")
    files.add_argument("--exclude", metavar="GLOBS", action="append", type=_globs,
                       help="comma-separated glob patterns of files and folders not to check, replacing the "
                            "defaults (hidden folders such as .git and .venv, __pycache__, venv, node_modules, "
                            "site-packages, and build and dist at a project root)")
    files.add_argument("--extend-exclude", metavar="GLOBS", action="append", type=_globs,
                       help="patterns to exclude in addition to the defaults and the configured ones")
    files.add_argument("--force-exclude", action="store_true",
                       help="apply the exclusions to files named on the command line too (as pre-commit names them)")
    files.add_argument("--stdin-filename", metavar="PATH",
                       help="the path to show (and to find pyproject.toml from) when reading standard input")
    files.add_argument("--no-config", action="store_true", help="do not read [tool.gradguard] from pyproject.toml")

    output = p.add_argument_group("output")
    output.add_argument("--format", "--output-format", dest="format", choices=FORMATS, default="concise",
                        help="concise (default, also 'text'): one short line per finding; full: with each "
                             "finding's consequence and fix; json; sarif; github: GitHub Actions annotations")
    output.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    output.add_argument("--statistics", action="store_true", help="print the number of findings per code instead")
    output.add_argument("--no-progress", action="store_true", help="no progress display on long runs")
    output.add_argument("--show-skipped", action="store_true",
                        help="also list the loops the analysis could not follow, with the reason (on stderr)")

    fixes = p.add_argument_group("fixes")
    fixes.add_argument("--fix", action="store_true", help="apply the safe fixes, then report what remains")
    fixes.add_argument("--unsafe-fixes", action="store_true",
                       help="with --fix/--diff/--fix-only: also apply fixes that change the numbers "
                            "(e.g. reweighting micro-batches)")
    fixes.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
    fixes.add_argument("--fix-only", action="store_true",
                       help="apply the fixes and report only how many; exit 0 unless a file could not be fixed")
    return p


def handle(args) -> int:
    from ..lint import iter_python_files, lint_files, lint_source
    from ..lint import find_config
    from ..lint import merge_config
    from ..rules import RULES, parse_codes
    from .._progress import progress

    def note(text: str) -> None:
        print(f"gradguard lint: warning: {text}", file=sys.stderr)

    if args.statistics and args.format in ("sarif", "github"):
        raise GradguardError(f"--statistics cannot be written as {args.format}: use --format text or json")
    paths = args.paths or ["."]
    stdin = "-" in paths
    if stdin and len(paths) > 1:
        raise GradguardError("'-' (standard input) cannot be combined with other paths")
    if args.stdin_filename and not stdin:
        raise GradguardError("--stdin-filename is only used with '-' (standard input)")

    config = None
    if not args.no_config:
        config = find_config([args.stdin_filename] if stdin and args.stdin_filename else ([] if stdin else paths))
    # unknown codes are a usage error before any file is read
    select, ignore = merge_config(config, args.select, args.ignore)
    chosen = (parse_codes(select) if select else frozenset(RULES)) - parse_codes(ignore)
    exclude, extend_exclude = _exclusions(args, config)

    fixing = args.fix or args.diff or args.fix_only
    skipped: list = []
    if stdin:
        name = args.stdin_filename or "-"
        if fixing:
            return _fix_stdin(args, name, select, ignore)
        source = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        findings = lint_source(source, name, select=select, ignore=ignore, notify=note)
    else:
        files, seen = [], set()
        for path in paths:
            found = list(iter_python_files([path], exclude=exclude, extend_exclude=extend_exclude,
                                           force_exclude=args.force_exclude, notify=note))
            if not found:
                note(f"no Python files found under {path!r}" if os.path.isdir(path) else f"{path!r} is excluded")
            for file in found:  # a file named twice (a folder and a file in it) is checked once
                key = os.path.realpath(file)
                if key not in seen:
                    seen.add(key)
                    files.append(os.path.normpath(file))  # `lint .` shows train.py, as `lint train.py` does
        if not files:
            return 0
        if fixing:
            return _fix_files(args, files, select, ignore)
        shown = progress(files, desc="gradguard lint", total=len(files), disable=args.no_progress)
        findings = lint_files(shown, chosen, note, skipped)
    # a file only a newer Python parses is always worth a word; skipped loops on request
    for s in skipped:
        if args.show_skipped or "syntax of Python" in s.reason:
            note(s.format())
    _write_findings(findings, args)
    return _exit_code(findings, args)


def _exit_code(findings, args, failed: int = 0) -> int:
    """1 for any finding (or a file that could not be fixed), else 0; ``--exit-zero``: 0.

    Every severity counts, as in ruff and flake8: a reported finding that should not fail a
    build is one to ignore (``--ignore``, ``[tool.gradguard]``), not one to print and pass.
    """
    if args.exit_zero:
        return 0
    return 1 if failed or findings else 0


def _fix_stdin(args, name, select, ignore) -> int:
    """Standard input in, the fixed source (or its diff) out."""
    from ..lint.autofix import fix_source, unified_diff

    text = sys.stdin.read()
    result = fix_source(text, name, select=select, ignore=ignore, unsafe=args.unsafe_fixes)
    _write(unified_diff(name, text, result.text) if args.diff else result.text)
    return 1 if args.diff and result.text != text else 0


def _fix_files(args, files, select, ignore) -> int:
    """``--fix``, ``--diff``, ``--fix-only``: repair files (or show how), then report what remains."""
    from ..lint.autofix import fix_file, unified_diff

    fixed, remaining, failed = 0, [], 0
    for path in files:
        done = fix_file(path, select=select, ignore=ignore, unsafe=args.unsafe_fixes, write=not args.diff)
        if done.result.error:
            failed += 1
            print(f"gradguard lint: {path}: {done.result.error}", file=sys.stderr)
        if args.diff and done.result.text != done.original:
            _write(unified_diff(path, done.original, done.result.text))
        fixed += len(done.result.fixed)
        remaining += done.result.remaining
    noun = "finding" if fixed == 1 else "findings"
    if args.diff:
        print(f"Would fix {fixed} {noun}.", file=sys.stderr)
        return 1 if fixed else 0
    if args.fix_only:
        print(f"Fixed {fixed} {noun}.")
        return 1 if failed else 0
    print(f"Fixed {fixed} {noun}.", file=sys.stderr if args.format in ("json", "sarif") else sys.stdout)
    _write_findings(remaining, args)
    return _exit_code(remaining, args, failed)


def _exclusions(args, config):
    """(exclude, extend_exclude): the flags win over the configuration; configured patterns with a
    ``/`` count from the folder of the pyproject.toml they were written in."""

    def flat(lists):
        return [g for group in lists or () for g in group]

    def anchored(patterns):
        if not patterns:
            return []
        base = config.source.parent
        return [os.path.join(base, p) if "/" in p.rstrip("/") else p for p in patterns]

    have = config is not None and config.source is not None
    if args.exclude is not None:
        exclude = flat(args.exclude)
    elif have and config.exclude is not None:
        exclude = anchored(config.exclude)
    else:
        exclude = None  # the defaults
    extend = (anchored(config.extend_exclude) if have else []) + flat(args.extend_exclude)
    return exclude, extend


def _write(text: str) -> None:
    """stdout, even for a file name that is not valid in its encoding (escaped, not a crash)."""
    out = sys.stdout
    try:
        out.write(text)
    except UnicodeEncodeError:
        encoding = getattr(out, "encoding", None) or "utf-8"
        out.write(text.encode(encoding, "backslashreplace").decode(encoding))


def _write_findings(findings, args) -> None:
    from ..findings import format_statistics, statistics, summary_line, to_json, to_sarif

    if args.format in ("json", "sarif"):
        from ..lint.autofix import with_fixes

        findings = with_fixes(findings)  # each finding carries the repair --fix would make
    if args.format == "sarif":
        _write(json.dumps(to_sarif(findings), indent=2) + "\n")
    elif args.format == "github":
        for f in findings:
            _write(github_annotation(f) + "\n")
    elif args.format == "json":
        if args.statistics:
            rows = [{"code": c, "name": n, "count": k} for c, n, k in statistics(findings)]
            _write(json.dumps(rows, indent=2) + "\n")
        else:
            _write(to_json(findings) + "\n")
    elif args.statistics:
        if findings:
            _write(format_statistics(findings) + "\n")
        _write(summary_line(findings) + "\n")
    else:
        full = args.format == "full"
        for f in findings:
            _write(f.format(full=full) + "\n")
        _write(summary_line(findings) + "\n")
        if findings and not full:
            code = findings[0].code
            _write(f"`gradguard rule {code}` explains a rule and its fix; --output-format full shows them here.\n")


_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def github_annotation(f) -> str:
    """One GitHub Actions workflow command, as ruff's ``--output-format github`` writes it
    (``endLine``/``endColumn``: where the flagged code ends, when known).

    >>> from gradguard.findings import Finding
    >>> github_annotation(Finding("GG101", "stale-gradient", "error", "Step reused: 50% stale.", "t.py", 3, 5,
    ...                           end_line=3, end_col=21))
    '::error title=gradguard (GG101),file=t.py,line=3,col=5,endLine=3,endColumn=21::t.py:3:5: GG101 Step reused: 50%25 stale.'
    """

    def data(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(text: str) -> str:
        return data(text).replace(":", "%3A").replace(",", "%2C")

    props = [f"title={prop(f'gradguard ({f.code})')}"]
    if f.path:
        props.append(f"file={prop(f.path)}")
    if f.line is not None:
        props.append(f"line={f.line}")
        if f.col is not None:
            props.append(f"col={f.col}")
        if f.end_line is not None:
            props.append(f"endLine={f.end_line}")
            if f.end_col is not None and f.col is not None:
                props.append(f"endColumn={f.end_col}")
    return f"::{_GITHUB_LEVEL.get(f.severity, 'warning')} {','.join(props)}::{data(f.format(full=True))}"
