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
  gradguard lint . --add-noqa                  silence today's findings with `# noqa: GGnnn`, to adopt it
  gradguard lint . --extend-select GG107 --per-file-ignores 'tests/*:GG101'

exit codes:
  0  no findings
  1  findings, whatever their severity, as ruff and flake8 do (with --fix: one left unfixed,
     or a file not fixed); an info rule such as GG107 that should not fail a build: --ignore it
     (or ignore = ["GG107"] in [tool.gradguard]), or --exit-zero
  2  a usage error (an unknown flag, rule code or path), with one line on stderr
  --exit-zero: 0 even with findings (2 still for usage errors)

Silence one line with `# gradguard: ignore[GG101]` or `# noqa: GG101` (or a bare
`# gradguard: ignore`; a bare `# noqa` is left to the other linters unless
blanket-noqa = true is configured). Defaults come from [tool.gradguard] (select,
extend-select, ignore, exclude, extend-exclude, per-file-ignores,
extend-per-file-ignores, blanket-noqa) in the nearest pyproject.toml. Command-line flags
win: --select replaces the configured select (and extend-select), --ignore the
configured ignore, --exclude the configured exclude and --per-file-ignores the configured
per-file ignores; a code asked for with --select or --extend-select is reported even if
the configuration ignores it (or a prefix of it).
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
    rules.add_argument("--extend-select", metavar="CODES",
                       help="codes or prefixes to report in addition to the selected ones")
    rules.add_argument("--ignore", metavar="CODES", help="comma-separated codes or prefixes not to report")
    rules.add_argument("--per-file-ignores", metavar="PATTERN:CODES", action="append",
                       help="codes not to report in the files a glob pattern matches, e.g. 'tests/*:GG101,GG104' "
                            "(pairs comma-separated, as ruff spells them); replaces the configured per-file-ignores")
    rules.add_argument("--extend-per-file-ignores", metavar="PATTERN:CODES", action="append",
                       help="like --per-file-ignores, in addition to the configured ones")

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
    output.add_argument("-q", "--quiet", action="store_true",
                        help="print the findings and nothing else (no summary or hint lines; warnings still go to stderr)")
    output.add_argument("--show-fixes", action="store_true",
                        help="list the fixes applied (--fix, --fix-only) or that would be (--diff), per file and "
                             "code; without them, count the findings that have a fix")
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
    fixes.add_argument("--add-noqa", action="store_true",
                       help="add `# noqa: GGnnn` to each line with findings (joining a noqa list already there), "
                            "so that a project adopts the linter with today's findings silenced; exit 0 unless a "
                            "file could not be written")
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
    select, ignore = merge_config(config, args.select, args.ignore, args.extend_select)
    chosen = (parse_codes(select) if select else frozenset(RULES)) - parse_codes(ignore)
    exclude, extend_exclude = _exclusions(args, config)
    args.per_file = _per_file_ignores(args, config)
    args.blanket_noqa = bool(config is not None and config.blanket_noqa)

    fixing = args.fix or args.diff or args.fix_only
    if args.add_noqa and (fixing or stdin):
        raise GradguardError("--add-noqa edits files: it cannot be combined with --fix, --diff, --fix-only or "
                             "'-' (standard input)")
    skipped: list = []
    if stdin:
        name = args.stdin_filename or "-"
        ignore = _ignore_in(args, ignore, name) if args.stdin_filename else ignore
        if fixing:
            return _fix_stdin(args, name, select, ignore)
        source = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        findings = lint_source(source, name, select=select, ignore=ignore, notify=note, blanket_noqa=args.blanket_noqa)
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
        if args.add_noqa:
            return _add_noqa(args, files, select, ignore)
        if fixing:
            return _fix_files(args, files, select, ignore)
        shown = progress(files, desc="gradguard lint", total=len(files), disable=args.no_progress)
        findings = lint_files(shown, chosen, note, skipped, per_file=args.per_file, blanket_noqa=args.blanket_noqa)
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
    result = fix_source(text, name, select=select, ignore=ignore, unsafe=args.unsafe_fixes, blanket_noqa=args.blanket_noqa)
    _write(unified_diff(name, text, result.text) if args.diff else result.text)
    return 1 if args.diff and result.text != text else 0


def _fix_files(args, files, select, ignore) -> int:
    """``--fix``, ``--diff``, ``--fix-only``: repair files (or show how), then report what remains."""
    from ..lint.autofix import fix_file, unified_diff

    fixed, remaining, failed = 0, [], 0
    applied = []
    for path in files:
        done = fix_file(path, select=select, ignore=_ignore_in(args, ignore, path), unsafe=args.unsafe_fixes,
                        write=not args.diff, blanket_noqa=args.blanket_noqa)
        if done.result.error:
            failed += 1
            print(f"gradguard lint: {path}: {done.result.error}", file=sys.stderr)
        if args.diff and done.result.text != done.original:
            _write(unified_diff(path, done.original, done.result.text))
        fixed += len(done.result.fixed)
        remaining += done.result.remaining
        applied.append((path, done.result.fixed))
    noun = "finding" if fixed == 1 else "findings"
    if args.diff:
        if not args.quiet:
            print(_fixed_text(f"Would fix {fixed} {noun}", applied, args), file=sys.stderr)
        return 1 if fixed else 0
    if args.fix_only:
        if not args.quiet:
            print(_fixed_text(f"Fixed {fixed} {noun}", applied, args))
        return 1 if failed else 0
    if not args.quiet or args.show_fixes:
        print(_fixed_text(f"Fixed {fixed} {noun}", applied, args),
              file=sys.stderr if args.format in ("json", "sarif") else sys.stdout)
    _write_findings(remaining, args)
    return _exit_code(remaining, args, failed)


def _fixed_text(head: str, applied, args) -> str:
    """``Fixed N findings.``; with ``--show-fixes`` (as ruff shows them) the count per file and code after it."""
    from ..rules import RULES

    if not args.show_fixes or not any(found for _, found in applied):
        return head + "."
    lines = [head + ":"]
    for path, found in applied:
        if not found:
            continue
        lines.append(f"- {path}:")
        counts: dict = {}
        for f in found:
            counts[f.code] = counts.get(f.code, 0) + 1
        for code, n in sorted(counts.items()):
            lines.append(f"    {n} \u00d7 {code} ({RULES[code].name if code in RULES else code})")
    return "\n".join(lines)


def _add_noqa(args, files, select, ignore) -> int:
    """``--add-noqa``: each file's lines with findings get ``# noqa: CODES``, written as ``--fix`` writes."""
    from ..lint.noqa import add_noqa
    from ..lint.autofix import fix_file

    added, failed = 0, 0
    for path in files:
        done = fix_file(path, select=select, ignore=_ignore_in(args, ignore, path), blanket_noqa=args.blanket_noqa,
                        fixer=add_noqa)
        if done.result.error:
            failed += 1
            print(f"gradguard lint: {path}: {done.result.error}", file=sys.stderr)
        elif done.result.remaining:
            for f in done.result.remaining:  # a line inside a string or a continuation cannot hold a comment
                print(f"gradguard lint: {f.location()}: {f.code} not silenced: no comment can go at the end of "
                      f"this line", file=sys.stderr)
        added += len({f.line for f in done.result.fixed}) if done.written else 0
    if not args.quiet:
        noun = "directive" if added == 1 else "directives"
        print(f"Added {added} noqa {noun}.", file=sys.stderr)
    return 1 if failed else 0


def _per_file_ignores(args, config):
    """The per-file ignores: the flags' (``--per-file-ignores`` replaces the configured ones,
    ``--extend-per-file-ignores`` adds), patterns counted from the current folder; the configured
    ones from their ``pyproject.toml``'s folder. None when there are none."""
    from ..lint import PerFileIgnores, parse_per_file_flag

    def flag(values):
        return [(p, codes, os.getcwd()) for text in values or () for p, codes in parse_per_file_flag(text)]

    entries = flag(args.per_file_ignores)
    if args.per_file_ignores is None and config is not None and config.source is not None:
        entries = [(p, codes, config.source.parent) for p, codes in config.per_file_ignores or ()]
    entries += flag(args.extend_per_file_ignores)
    try:
        ignores = PerFileIgnores(entries)
    except GradguardError as exc:
        raise GradguardError(f"--per-file-ignores: {exc}") from None
    return ignores or None


def _ignore_in(args, ignore, path: str):
    """``ignore`` plus the per-file ignores of ``path``."""
    extra = args.per_file(path) if args.per_file is not None else ()
    return [*(ignore or []), *sorted(extra)] if extra else ignore


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
        if not args.quiet:
            _write(summary_line(findings) + "\n")
    else:
        full = args.format == "full"
        for f in findings:
            _write(f.format(full=full) + "\n")
        if args.quiet:  # the findings and nothing else, as ruff's --quiet
            return
        _write(summary_line(findings) + "\n")
        if args.show_fixes:
            safe = sum(f.fix is not None and f.fix.applicability == "safe" for f in findings)
            unsafe = sum(f.fix is not None and f.fix.applicability != "safe" for f in findings)
            if safe or unsafe:
                _write(f"{safe} fixable with --fix" + (f", {unsafe} more with --unsafe-fixes" if unsafe else "") + ".\n")
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
