"""Scaffold a new rule: its modules, its fixture pairs, its catalogue entry, and the docs.

    python scripts/add_rule.py GG116 kebab-name --severity warning            # the watch and the linter
    python scripts/add_rule.py GG116 kebab-name --severity error --watch      # the watch only
    python scripts/add_rule.py GG116 kebab-name --severity warning --lint     # the linter only

It creates, for the linter, ``src/gradguard/lint/rules/ggNNN_<name>.py`` (an empty check, its
``FIXTURES`` and ``FIX_SAFETY``); for the watch, ``src/gradguard/watcher/rules/ggNNN.py`` (an
empty ``at_step`` handler and its ``EVENTS``); and the rule's programs: for a rule on both sides
one pair that both tools check, ``tests/rule_pairs/ggNNN_<name>_bad.py`` / ``_good.py``; for a
one-side rule its side's pair, ``tests/lint_fixtures/ggNNN_<name>_bad.py`` / ``_good.py`` or
``tests/watch_scripts/ggNNN_bad.py`` / ``_good.py``. It inserts the rule's entry into the
catalogue (``src/gradguard/rules.py``, in code order), written from the text flags
(``--summary``, ``--consequence``, ``--fix``, ``--what``, ``--why``, ``--example``,
``--instead``; ``@FILE`` reads a value from a file), and regenerates docs/rules.md and the
README's rule table (``scripts/gen_rules_md.py``). Nothing else lists rules: both sides find
their modules by file name.

Every place to fill is marked ``TODO(add_rule)`` (a text flag left out leaves its field so
marked), and the stubs fail the rule's own tests until filled: the bad programs fire nothing,
and the tests refuse any file or catalogue text that still holds the marker. It refuses, with one line and exit status 2, a malformed or taken code,
a malformed or taken name, a malformed text (a one-line field over several lines, an empty
text, an unreadable ``@FILE``), and a target that is not clean (a file it would create exists, a
file it would edit has uncommitted changes, or the generated docs are already stale); it
writes nothing then.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The marker of every place a developer must fill; the tests fail while one is left.
TODO = "TODO(add_rule)"

_CODE = re.compile(r"GG\d{3}")
_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
#: The catalogue's text fields, in the order of a Rule; the first three are one line each (a finding's message).
FIELDS = ("summary", "consequence", "fix", "what", "why", "example", "instead")
_ONE_LINE = ("summary", "consequence", "fix")


class Refusal(Exception):
    """Bad input or a target that is not clean: one line for the user, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise Refusal(f"{message} (see python scripts/add_rule.py --help)")


def _paths(code: str, name: str, watch: bool, lint: bool, root: Path) -> dict:
    """kind -> the path of each file the rule gets."""
    low, snake = code.lower(), name.replace("-", "_")
    paths = {}
    if lint:
        paths["lint module"] = root / "src" / "gradguard" / "lint" / "rules" / f"{low}_{snake}.py"
    if watch:
        paths["watch module"] = root / "src" / "gradguard" / "watcher" / "rules" / f"{low}.py"
    if lint and watch:  # one program pair that both tools check
        paths["pair bad"] = root / "tests" / "rule_pairs" / f"{low}_{snake}_bad.py"
        paths["pair good"] = root / "tests" / "rule_pairs" / f"{low}_{snake}_good.py"
    elif lint:
        paths["lint bad"] = root / "tests" / "lint_fixtures" / f"{low}_{snake}_bad.py"
        paths["lint good"] = root / "tests" / "lint_fixtures" / f"{low}_{snake}_good.py"
    else:
        paths["watch bad"] = root / "tests" / "watch_scripts" / f"{low}_bad.py"
        paths["watch good"] = root / "tests" / "watch_scripts" / f"{low}_good.py"
    return paths


def _catalogue(root: Path) -> tuple:
    """(the catalogue's text, its syntax tree, the RULE_LIST entries as (code, name, call node))."""
    text = (root / "src" / "gradguard" / "rules.py").read_text(encoding="utf-8")
    tree = ast.parse(text)
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if isinstance(node.value if targets else None, ast.List) and any(
                isinstance(t, ast.Name) and t.id == "RULE_LIST" for t in targets):
            entries = []
            for call in node.value.elts:
                fields = {k.arg: k.value.value for k in getattr(call, "keywords", ())
                          if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)}
                if "code" not in fields or "name" not in fields:
                    raise Refusal(f"src/gradguard/rules.py: an entry of RULE_LIST at line {call.lineno} has no literal "
                                  "code= and name=: the scaffolder cannot place a new one")
                entries.append((fields["code"], fields["name"], call))
            return text, tree, entries
    raise Refusal("src/gradguard/rules.py has no RULE_LIST = [...] table: the scaffolder cannot add the entry")


def _next_order_key(root: Path, event: str) -> int:
    """An order key after every rule's on ``event`` (read from each watch module's EVENTS literal)."""
    keys = [0]
    for path in (root / "src" / "gradguard" / "watcher" / "rules").glob("gg*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EVENTS" for t in node.targets):
                try:
                    keys.append(int(ast.literal_eval(node.value).get(event, 0)))
                except (ValueError, TypeError, AttributeError):
                    pass  # an EVENTS not written as a literal: tests/test_watch_rule_modules.py judges it
    return max(keys) // 10 * 10 + 10


def _dirty(root: Path, files: list) -> list:
    """The files among ``files`` with uncommitted changes (none when ``root`` is not a git checkout)."""
    try:
        done = subprocess.run(["git", "status", "--porcelain", "--", *map(str, files)], cwd=root,
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []  # not a git checkout (a copy of the tree): nothing to compare with
    return [line[3:] for line in done.stdout.splitlines() if line.strip()]


def _generator(root: Path, *args: str) -> subprocess.CompletedProcess:
    # A subprocess, so that it reads the catalogue this run has just written, from this tree's src/.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(root / "scripts" / "gen_rules_md.py"), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


# --- the texts --------------------------------------------------------------------------------


def _literal(field: str, value: str) -> str:
    """``value`` as Python source for the entry (json's double-quoted escapes are Python's too)."""
    if field in ("example", "instead") and '"""' not in value and "\\" not in value and not value.endswith('"'):
        return '"""\n' + value.strip("\n") + '\n"""'  # the catalogue's own shape for code excerpts
    lines = value.splitlines(keepends=True)
    if len(lines) == 1:
        return json.dumps(value, ensure_ascii=False)
    return "(\n" + "".join(f"            {json.dumps(line, ensure_ascii=False)}\n" for line in lines) + "        )"


def _placeholder(field: str, sides: str) -> str:
    return {
        "summary": f"{TODO}: one line, what happened.",
        "consequence": f"{TODO}: what it does to the training run.",
        "fix": f"{TODO}: what to change in the loop.",
        "what": f"{TODO}: what {sides} flag, and the correct shapes they leave alone.",
        "why": f"{TODO}: why .grad's arithmetic makes this a bug.",
        "example": f"# {TODO}: an excerpt of a loop with the bug",
        "instead": f"# {TODO}: the same loop, fixed",
    }[field]


def _entry(code: str, name: str, severity: str, watch: bool, lint: bool, texts: dict) -> str:
    """The entry's source, each text field from ``texts`` or a marked placeholder; checked by reading it back."""
    sides = "the watch and the linter" if watch and lint else "the watch only" if watch else "the linter only"
    values = {f: texts.get(f) if texts.get(f) is not None else _placeholder(f, sides) for f in FIELDS}
    lines = ["    Rule(", f'        code="{code}",', f'        name="{name}",', f'        severity="{severity}",']
    lines += [f"        {f}={_literal(f, values[f])}," for f in FIELDS]
    if not watch:
        lines.append("        runtime=False,")
    if not lint:
        lines.append("        static=False,")
    lines.append("    ),")
    source = "\n".join(lines) + "\n"
    # what the catalogue will hold is what was asked, before anything is written
    call = ast.parse(source.strip().rstrip(",")).body[0].value
    read = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    for f in FIELDS:
        same = read[f].strip("\n") == values[f].strip("\n") if f in ("example", "instead") else read[f] == values[f]
        if not same:  # pragma: no cover - a bug of _literal, never the user's text
            raise Refusal(f"internal error: the {f} text would not be written as given; please report it")
    return source


def _text(field: str, value) -> "str | None":
    """A text flag's value (``@FILE``: that file's text), checked; None when not given."""
    if value is None:
        return None
    if value.startswith("@"):
        try:
            value = Path(value[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise Refusal(f"--{field} {value}: cannot read {value[1:]!r} ({exc.strerror or exc}): give an existing text file")
    value = value.strip("\n") if field in ("example", "instead") else value.strip()
    if not value.strip():
        raise Refusal(f"--{field} is empty: give the text, or leave the flag out to fill it in rules.py later")
    if field in _ONE_LINE and "\n" in value:
        raise Refusal(f"--{field} has {value.count(chr(10)) + 1} lines: it is one line of every finding's message, "
                      "write it on one line")
    if TODO in value:
        raise Refusal(f"--{field} holds the marker {TODO}: give the rule's own text")
    return value


def _lint_module(code: str, name: str, bad: str, good: str, folder: str) -> str:
    return f'''"""{code} {name}: {TODO}: one sentence, what the linter flags (and what it leaves alone)."""

from __future__ import annotations

from .._model import Loop, Report

CODE = "{code}"
#: Its fixture pair in {folder}/: code that must fire it, correct code that must not.
FIXTURES = ("{bad}", "{good}")
#: No automatic fix: with a ``fix(tree, diagnostic)`` here, "safe" (``--fix``) or "unsafe" (``--unsafe-fixes``).
FIX_SAFETY = None


def check_loop(loop: Loop, report: Report) -> None:
    """Called on every training loop of the program model (or write ``check_module(module, report)``,
    called once per file); report a finding with ``report(CODE, node, message)``."""
    # {TODO}: the check. Until it reports, the bad fixture's marked lines fail the rule's tests.
'''


def _lint_fixture(code: str, name: str, bad: bool) -> str:
    if bad:
        return f'''"""{code}: {TODO}: the bug in the shapes users write it; mark each line the rule must report
with a trailing ``# expect: {code}`` comment (tests/test_lint_fixtures.py checks exactly those lines)."""


def the_bug(model, loader, optimizer):
    raise NotImplementedError  # expect: {code}  ({TODO}: replace by the bug)
'''
    return f'''"""{code}: correct code of the same shapes (no finding expected). {TODO}: write it."""
'''


def _watch_module(code: str, name: str, key: int) -> str:
    return f'''"""{code} {name}: {TODO}: one sentence, what the watch flags (and what it leaves alone)."""

from __future__ import annotations

from .._view import StepView

CODE = "{code}"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {{"at_step": {key}}}


def at_step(view: StepView) -> None:
    """Before an optimizer step reads .grad; report with ``view.report(CODE, message, view.site, view.n, params)``."""
    # {TODO}: the check. Until it reports, the bad script fails the rule's tests.
'''


def _pair(code: str, bad: bool) -> str:
    if bad:
        return f'''"""{code}: {TODO}: a runnable training program with the bug, in the shapes users write it:
`gradguard run` must report {code} once, and each line the linter must report ends with a
trailing ``# expect: {code}`` comment (tests/test_lint_fixtures.py checks exactly those lines)."""
import torch

torch.manual_seed(0)
the_bug = None  # expect: {code}  ({TODO}: replace by the bug)
'''
    return f'''"""{code}: {TODO}: the same program, fixed: neither `gradguard run` nor the linter reports anything."""
import torch

torch.manual_seed(0)
'''


def _watch_script(code: str, bad: bool) -> str:
    what = "a loop with the bug: `gradguard run` must report " + code + " once" if bad else \
        "the same loop, fixed: `gradguard run` must report nothing"
    return f'''"""{code}: {TODO}: {what}."""
import torch

torch.manual_seed(0)
'''


# --- the command ------------------------------------------------------------------------------


def add_rule(code: str, name: str, severity: str, watch: bool, lint: bool, root: Path = ROOT, texts=None) -> list:
    """Create the rule's files and entry under ``root``; return the files written. ``texts``: field ->
    text of the catalogue entry (a field not given is left marked ``TODO(add_rule)``). Raises Refusal."""
    texts = {f: _text(f, (texts or {}).get(f)) for f in FIELDS}
    code = code.upper()
    if not _CODE.fullmatch(code):
        raise Refusal(f"rule code {code!r} is not of the form GGnnn (three digits, e.g. GG116)")
    if not _NAME.fullmatch(name):
        raise Refusal(f"rule name {name!r} is not kebab-case (lower-case words joined by '-', e.g. clip-before-unscale)")
    text, _, entries = _catalogue(root)
    for taken_code, taken_name, _ in entries:
        if taken_code == code:
            raise Refusal(f"rule code {code} is taken by {taken_code} {taken_name}: choose a free code")
        if taken_name == name:
            raise Refusal(f"rule name {name!r} is taken by {taken_code}: choose another name")
    paths = _paths(code, name, watch, lint, root)
    # a module or fixture of this code under another name is a rule half added: finish or remove it first
    low = code.lower()
    for folder, pattern in (("src/gradguard/lint/rules", f"{low}_*.py"), ("src/gradguard/watcher/rules", f"{low}.py"),
                            ("tests/lint_fixtures", f"{low}_*.py"), ("tests/watch_scripts", f"{low}_*.py"),
                            ("tests/rule_pairs", f"{low}_*.py")):
        for found in sorted((root / folder).glob(pattern)):
            raise Refusal(f"{found.relative_to(root)} exists: code {code} is taken by files not in the catalogue "
                          "(remove them or choose another code)")
    edited = [root / "src" / "gradguard" / "rules.py", root / "README.md", root / "docs" / "rules.md"]
    dirty = _dirty(root, edited)
    if dirty:
        raise Refusal(f"{dirty[0]} has uncommitted changes: commit or stash them first (the scaffolder edits it)")
    stale = _generator(root, "--check")
    if stale.returncode != 0:
        first = (stale.stderr.strip().splitlines() or ["scripts/gen_rules_md.py --check failed"])[0]
        raise Refusal(f"the generated docs are not clean before adding a rule: {first}")

    entry = _entry(code, name, severity, watch, lint, texts)

    # all checked: now write (the new files, then the entry, then the docs from it)
    files = {}
    if lint:
        bad, good = (paths["pair bad"], paths["pair good"]) if watch else (paths["lint bad"], paths["lint good"])
        files[paths["lint module"]] = _lint_module(code, name, bad.name, good.name, bad.parent.relative_to(root).as_posix())
    if watch:
        files[paths["watch module"]] = _watch_module(code, name, _next_order_key(root, "at_step"))
    if lint and watch:
        paths["pair bad"].parent.mkdir(exist_ok=True)
        files[paths["pair bad"]] = _pair(code, True)
        files[paths["pair good"]] = _pair(code, False)
    elif lint:
        files[paths["lint bad"]] = _lint_fixture(code, name, True)
        files[paths["lint good"]] = _lint_fixture(code, name, False)
    else:
        files[paths["watch bad"]] = _watch_script(code, True)
        files[paths["watch good"]] = _watch_script(code, False)
    for path, body in files.items():
        with open(path, "x", encoding="utf-8") as out:  # "x": never over a file that appeared meanwhile
            out.write(body)
    # the entry goes after the one with the largest code below it (first when there is none)
    _, _, entries = _catalogue(root)
    below = [(c, call) for c, _, call in entries if c < code]
    lines = text.splitlines(keepends=True)
    at = max(below, key=lambda pair: pair[0])[1].end_lineno if below else entries[0][2].lineno - 1
    lines.insert(at, entry)
    (root / "src" / "gradguard" / "rules.py").write_text("".join(lines), encoding="utf-8")
    done = _generator(root)
    if done.returncode != 0:
        raise Refusal(f"scripts/gen_rules_md.py failed after the entry was added: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return list(files) + [p for p in edited if p.is_file()]


def main(argv=None) -> int:
    parser = _Parser(prog="python scripts/add_rule.py", description=__doc__.splitlines()[0])
    parser.add_argument("code", help="the new rule's code, GGnnn")
    parser.add_argument("name", help="its name, kebab-case")
    parser.add_argument("--severity", required=True, choices=("error", "warning", "info"))
    parser.add_argument("--watch", action="store_true", help="the run-time watch reports it")
    parser.add_argument("--lint", action="store_true", help="the linter reports it")
    helps = {"summary": "one line: what happened (a finding's message starts with it)",
             "consequence": "one line: what it does to the training run",
             "fix": "one line: what to change in the loop",
             "what": "what each side flags, and the correct shapes it leaves alone",
             "why": "why .grad's arithmetic makes this a bug",
             "example": "an excerpt of a loop with the bug", "instead": "the same loop, fixed"}
    for field in FIELDS:
        parser.add_argument(f"--{field}", metavar="TEXT|@FILE",
                            help=f"the catalogue's {field}: {helps[field]} (left out: a TODO(add_rule) to fill in rules.py)")
    try:
        args = parser.parse_args(argv)
        watch, lint = (args.watch, args.lint) if args.watch or args.lint else (True, True)
        written = add_rule(args.code, args.name, args.severity, watch, lint,
                           texts={f: getattr(args, f) for f in FIELDS})
    except Refusal as exc:
        print(f"add_rule.py: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    print(f"next: fill every {TODO} (grep -rn '{TODO}' src tests), run python scripts/gen_rules_md.py, then "
          f"pytest tests/test_lint_fixtures.py tests/test_lint_registry.py tests/test_watch_rules.py "
          f"tests/test_watch_rule_modules.py -k {args.code.lower()} and pytest tests/test_lint_docs.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
