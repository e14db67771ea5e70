"""Scaffold a new rule: its modules, its fixture pairs, its catalogue entry, and the docs.

    python scripts/add_rule.py GG115 kebab-name --severity warning            # the watch and the linter
    python scripts/add_rule.py GG115 kebab-name --severity error --watch      # the watch only
    python scripts/add_rule.py GG115 kebab-name --severity warning --lint     # the linter only

It creates, for the linter, ``src/gradguard/lint/rules/ggNNN_<name>.py`` (an empty check, its
``FIXTURES`` and ``FIX_SAFETY``) and the pair ``tests/lint_fixtures/ggNNN_<name>_bad.py`` /
``_good.py``; for the watch, ``src/gradguard/watcher/rules/ggNNN.py`` (an empty ``at_step``
handler and its ``EVENTS``) and the pair ``tests/watch_scripts/ggNNN_bad.py`` / ``_good.py``. It
inserts the rule's entry into the catalogue (``src/gradguard/rules.py``, in code order) and
regenerates docs/rules.md and the README's rule table (``scripts/gen_rules_md.py``). Nothing
else lists rules: both sides find their modules by file name.

Every place to fill is marked ``TODO(add_rule)``, and the stubs fail the rule's own tests until
filled: the bad fixtures fire nothing, and the tests refuse any file or catalogue text that
still holds the marker. It refuses, with one line and exit status 2, a malformed or taken code,
a malformed or taken name, and a target that is not clean (a file it would create exists, a
file it would edit has uncommitted changes, or the generated docs are already stale); it
writes nothing then.
"""

from __future__ import annotations

import argparse
import ast
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
        paths["lint bad"] = root / "tests" / "lint_fixtures" / f"{low}_{snake}_bad.py"
        paths["lint good"] = root / "tests" / "lint_fixtures" / f"{low}_{snake}_good.py"
    if watch:
        paths["watch module"] = root / "src" / "gradguard" / "watcher" / "rules" / f"{low}.py"
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


def _entry(code: str, name: str, severity: str, watch: bool, lint: bool) -> str:
    sides = "the watch and the linter" if watch and lint else "the watch only" if watch else "the linter only"
    lines = [
        "    Rule(",
        f'        code="{code}",',
        f'        name="{name}",',
        f'        severity="{severity}",',
        f'        summary="{TODO}: one line, what happened.",',
        f'        consequence="{TODO}: what it does to the training run.",',
        f'        fix="{TODO}: what to change in the loop.",',
        f'        what="{TODO}: what {sides} flag, and the correct shapes they leave alone.",',
        f'        why="{TODO}: why .grad\'s arithmetic makes this a bug.",',
        '        example="""',
        f"# {TODO}: an excerpt of a loop with the bug",
        '""",',
        '        instead="""',
        f"# {TODO}: the same loop, fixed",
        '""",',
    ]
    if not watch:
        lines.append("        runtime=False,")
    if not lint:
        lines.append("        static=False,")
    lines.append("    ),")
    return "\n".join(lines) + "\n"


def _lint_module(code: str, name: str, bad: str, good: str) -> str:
    return f'''"""{code} {name}: {TODO}: one sentence, what the linter flags (and what it leaves alone)."""

from __future__ import annotations

from .._model import Loop, Report

CODE = "{code}"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
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


def _watch_script(code: str, bad: bool) -> str:
    what = "a loop with the bug: `gradguard run` must report " + code + " once" if bad else \
        "the same loop, fixed: `gradguard run` must report nothing"
    return f'''"""{code}: {TODO}: {what}."""
import torch

torch.manual_seed(0)
'''


# --- the command ------------------------------------------------------------------------------


def add_rule(code: str, name: str, severity: str, watch: bool, lint: bool, root: Path = ROOT) -> list:
    """Create the rule's files and entry under ``root``; return the files written. Raises Refusal."""
    code = code.upper()
    if not _CODE.fullmatch(code):
        raise Refusal(f"rule code {code!r} is not of the form GGnnn (three digits, e.g. GG115)")
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
                            ("tests/lint_fixtures", f"{low}_*.py"), ("tests/watch_scripts", f"{low}_*.py")):
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

    # all checked: now write (the new files, then the entry, then the docs from it)
    texts = {}
    if lint:
        bad, good = paths["lint bad"].name, paths["lint good"].name
        texts[paths["lint module"]] = _lint_module(code, name, bad, good)
        texts[paths["lint bad"]] = _lint_fixture(code, name, True)
        texts[paths["lint good"]] = _lint_fixture(code, name, False)
    if watch:
        texts[paths["watch module"]] = _watch_module(code, name, _next_order_key(root, "at_step"))
        texts[paths["watch bad"]] = _watch_script(code, True)
        texts[paths["watch good"]] = _watch_script(code, False)
    for path, body in texts.items():
        with open(path, "x", encoding="utf-8") as out:  # "x": never over a file that appeared meanwhile
            out.write(body)
    # the entry goes after the one with the largest code below it (first when there is none)
    _, _, entries = _catalogue(root)
    below = [(c, call) for c, _, call in entries if c < code]
    lines = text.splitlines(keepends=True)
    at = max(below, key=lambda pair: pair[0])[1].end_lineno if below else entries[0][2].lineno - 1
    lines.insert(at, _entry(code, name, severity, watch, lint))
    (root / "src" / "gradguard" / "rules.py").write_text("".join(lines), encoding="utf-8")
    done = _generator(root)
    if done.returncode != 0:
        raise Refusal(f"scripts/gen_rules_md.py failed after the entry was added: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return list(texts) + [p for p in edited if p.is_file()]


def main(argv=None) -> int:
    parser = _Parser(prog="python scripts/add_rule.py", description=__doc__.splitlines()[0])
    parser.add_argument("code", help="the new rule's code, GGnnn")
    parser.add_argument("name", help="its name, kebab-case")
    parser.add_argument("--severity", required=True, choices=("error", "warning", "info"))
    parser.add_argument("--watch", action="store_true", help="the run-time watch reports it")
    parser.add_argument("--lint", action="store_true", help="the linter reports it")
    try:
        args = parser.parse_args(argv)
        watch, lint = (args.watch, args.lint) if args.watch or args.lint else (True, True)
        written = add_rule(args.code, args.name, args.severity, watch, lint)
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
