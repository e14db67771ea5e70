"""scripts/add_rule.py: a new rule on both sides from one command, and the hand edits that remain.

The goal test plays a developer adding a made-up rule, GG950 zero-learning-rate (an optimizer
whose every parameter group has lr=0: no rule of the catalogue uses the code), in a copy of the
repository: scaffold, check that the stubs fail their own tests, make the hand edits (small
prepared text edits), regenerate the docs, and run the rule's tests there. It counts the files
edited by hand and checks that no other rule's fixture, script or corpus program changed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TODO = "TODO" + "(add_rule)"  # two parts: a grep for the marker finds no test


def _load():
    spec = importlib.util.spec_from_file_location("add_rule", ROOT / "scripts" / "add_rule.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _copy(tmp_path: Path) -> Path:
    """The parts of the repository a rule lives in, copied (no caches)."""
    root = tmp_path / "repo"
    for part in ("src", "tests", "scripts", "docs"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("README.md", "pyproject.toml"):
        shutil.copy2(ROOT / name, root / name)
    return root


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _env(root: Path) -> dict:
    # the copy's own src/ first: the installed (editable) gradguard is the checkout's, not the copy's
    return {**os.environ, "PYTHONPATH": str(root / "src"), "OMP_NUM_THREADS": "1"}


def _scaffold(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "scripts" / "add_rule.py"), *args], cwd=root, env=_env(root),
                          capture_output=True, text=True, timeout=300)


# --- refusals: one line, exit 2, nothing written -----------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["GG101", "some-new-name", "--severity", "error"], "GG101 is taken by GG101 stale-gradient"),
    (["GG950", "stale-gradient", "--severity", "error"], "'stale-gradient' is taken by GG101"),
    (["GG950", "Zero_LR", "--severity", "error"], "'Zero_LR' is not kebab-case"),
    (["GG950", "zero-", "--severity", "error"], "'zero-' is not kebab-case"),
    (["GG95", "zero-lr", "--severity", "error"], "'GG95' is not of the form GGnnn"),
    (["XX950", "zero-lr", "--severity", "error"], "'XX950' is not of the form GGnnn"),
    (["GG950", "zero-lr", "--severity", "fatal"], "invalid choice: 'fatal'"),
    (["GG950", "zero-lr"], "--severity"),
    (["GG950", "zero-lr", "--severity", "error", "--fix", "Clear it.\nThen step."], "--fix has 2 lines"),
    (["GG950", "zero-lr", "--severity", "error", "--summary", "  "], "--summary is empty"),
    (["GG950", "zero-lr", "--severity", "error", "--why", TODO + " later"], "--why holds the marker"),
    (["GG950", "zero-lr", "--severity", "error", "--example", "@no/such/file.py"], "--example @no/such/file.py: cannot read"),
])
def test_bad_input_is_refused_in_one_line(tmp_path, args, words):
    root = _copy(tmp_path)
    before = _snapshot(root)
    done = _scaffold(root, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert _snapshot(root) == before


@pytest.mark.slow
def test_a_target_that_is_not_clean_is_refused(tmp_path):
    add_rule = _load()
    root = _copy(tmp_path)
    # a file the rule would get exists already (a rule half added)
    (root / "tests" / "watch_scripts" / "gg950_bad.py").write_text("# someone's work\n", encoding="utf-8")
    before = _snapshot(root)
    with pytest.raises(add_rule.Refusal, match=r"tests/watch_scripts/gg950_bad.py exists"):
        add_rule.add_rule("GG950", "zero-learning-rate", "warning", True, True, root)
    assert _snapshot(root) == before
    # a lint-only rule does not look at the watch side's files ... but still at its own
    (root / "tests" / "watch_scripts" / "gg950_bad.py").unlink()
    (root / "tests" / "lint_fixtures" / "gg950_other_name_good.py").write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(add_rule.Refusal, match="gg950_other_name_good.py exists"):
        add_rule.add_rule("GG950", "zero-learning-rate", "warning", False, True, root)
    (root / "tests" / "lint_fixtures" / "gg950_other_name_good.py").unlink()
    # generated docs already stale: regenerating would mix someone's change into the new rule's
    page = root / "docs" / "rules.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nhand-written line\n", encoding="utf-8")
    before = _snapshot(root)
    with pytest.raises(add_rule.Refusal, match="not clean before adding a rule: .*rules.md is out of date"):
        add_rule.add_rule("GG950", "zero-learning-rate", "warning", True, True, root)
    assert _snapshot(root) == before


def test_uncommitted_changes_to_the_catalogue_are_refused(tmp_path):
    add_rule = _load()
    root = _copy(tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(git + ["init", "-q"], cwd=root, check=True)
    subprocess.run(git + ["add", "src/gradguard/rules.py", "README.md", "docs/rules.md"], cwd=root, check=True)
    subprocess.run(git + ["commit", "-qm", "base"], cwd=root, check=True)
    catalogue = root / "src" / "gradguard" / "rules.py"
    catalogue.write_text(catalogue.read_text(encoding="utf-8") + "\n# a change not committed\n", encoding="utf-8")
    before = _snapshot(root)
    with pytest.raises(add_rule.Refusal, match="rules.py has uncommitted changes: commit or stash them first"):
        add_rule.add_rule("GG950", "zero-learning-rate", "warning", True, True, root)
    assert _snapshot(root) == before


@pytest.mark.slow
def test_the_entry_holds_the_texts_as_given(tmp_path):
    # quotes, backslashes, a triple quote in an excerpt, non-ASCII: the catalogue reads back each text
    # as given; the fields not given stay marked, so the docs test still refuses the entry
    add_rule = _load()
    root = _copy(tmp_path)
    texts = {"summary": 'A "quoted" \\ summary, 0 ≠ 1.', "what": "first line\n  second 'line'\n",
             "example": 's = """doc"""\nx = "a\\n"', "instead": "for x in loader:\n    step(x)"}
    add_rule.add_rule("GG950", "zero-learning-rate", "warning", True, True, root, texts=dict(texts))
    read = subprocess.run([sys.executable, "-c", "import json, gradguard.rules as r; print(json.dumps(r.RULES['GG950']._asdict()))"],
                          cwd=root, env=_env(root), capture_output=True, text=True, timeout=120)
    entry = __import__("json").loads(read.stdout)
    assert entry["summary"] == texts["summary"] and entry["what"] == texts["what"].strip()
    assert entry["example"].strip("\n") == texts["example"] and entry["instead"].strip("\n") == texts["instead"]
    assert all(entry[f].startswith(TODO) for f in ("consequence", "fix", "why"))


@pytest.mark.slow
@pytest.mark.parametrize("flag, side, other", [("--lint", "lint", "watch"), ("--watch", "watch", "lint")])
def test_one_side_only(tmp_path, flag, side, other):
    root = _copy(tmp_path)
    before = _snapshot(root)
    done = _scaffold(root, "gg190", "one-side-rule", "--severity", "info", flag)
    assert done.returncode == 0, done.stderr
    after = _snapshot(root)
    created = sorted(set(after) - set(before))
    assert len(created) == 3 and all("gg190" in p for p in created), created
    assert all(("lint" in p) == (side == "lint") for p in created), created
    entry = (root / "src" / "gradguard" / "rules.py").read_text(encoding="utf-8")
    entry = entry[entry.index('code="GG190"'):]
    entry = entry[:entry.index("\n    ),\n")]
    assert entry.count("runtime=False") == (side == "lint") and entry.count("static=False") == (side == "watch")
    # placed in code order (between the last GG1xx rule and GG201, whichever rules exist by then)
    codes = re.findall(r'code="(GG\d{3})"', (root / "src" / "gradguard" / "rules.py").read_text(encoding="utf-8"))
    at = codes.index("GG190")
    assert codes[at - 1] < "GG190" and codes[at + 1] == "GG201"
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert f"| [GG190](docs/rules.md#gg190) | one-side-rule | info | {'yes' if side == 'watch' else ''} | " \
           f"{'yes' if side == 'lint' else ''} |" in readme


# --- the goal: a rule on both sides, the hand edits counted --------------------------------------

#: What a developer writes after the scaffolder: path -> [(regular expression, replacement)], each
#: applied once to the file the scaffolder left. Only these files are edited by hand.
HAND_EDITS = {
    "src/gradguard/lint/rules/gg950_zero_learning_rate.py": [
        (r"TODO\(add_rule\): one sentence[^\"]*", "an optimizer built with a literal lr=0."),
        (r"from \.\._model import Loop, Report", "import ast\n\nfrom .._model import Module, Report"),
        (r"(?s)def check_loop\(.*", "def check_module(module: Module, report: Report) -> None:\n"
         "    for node in ast.walk(module.tree):\n"
         "        if isinstance(node, ast.Call):\n"
         "            for kw in node.keywords:\n"
         "                if kw.arg == 'lr' and isinstance(kw.value, ast.Constant) and kw.value.value == 0:\n"
         "                    report(CODE, node, 'This optimizer is built with lr=0.')\n"),
    ],
    "src/gradguard/watcher/rules/gg950.py": [
        (r"TODO\(add_rule\): one sentence[^\"]*", "a first step where every parameter group has lr=0."),
        (r"    # TODO\(add_rule\): the check\..*", "    if view.n == 1 and all(g.get('lr') == 0 for g in view.opt.param_groups):\n"
         "        view.report(CODE, f'At {view.name}.step() (step {view.n}) every parameter group has lr=0.', "
         "view.site, view.n, view.with_grad)"),
    ],
}
_PROGRAM = """import torch

torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr={lr}){mark}
for x in [torch.ones(4, 2)] * 3:
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()
"""
#: The one program pair the scaffolder created, which both tools check, written in full by hand.
HAND_WRITTEN = {
    "tests/rule_pairs/gg950_zero_learning_rate_bad.py": '"""GG950: built and stepped with lr=0."""\n' + _PROGRAM.format(lr=0, mark="  # expect: GG950"),
    "tests/rule_pairs/gg950_zero_learning_rate_good.py": '"""GG950: the same, lr=0.1."""\n' + _PROGRAM.format(lr=0.1, mark=""),
}
#: The catalogue entry, given to the scaffolder as flags (``@FILE`` for the code excerpts): rules.py is not edited by hand.
ENTRY = {
    "summary": "Every parameter group of an optimizer has a learning rate of 0.",
    "consequence": "Its steps move no parameter: the gradients are computed for nothing.",
    "fix": "Give the optimizer a learning rate above 0.",
    "what": "Flags an optimizer built with a literal `lr=0` (lint),\nor stepped with lr=0 in every group (watch).",
    "why": "A step of size 0 applies nothing of `.grad`.",
    "example": "optimizer = torch.optim.SGD(model.parameters(), lr=0)\nfor x in loader:\n    model(x).sum().backward()\n",
    "instead": "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
}
#: The tests a developer runs for the new rule: its own (with the rule alone), the registries, the
#: docs, and the all-rule programs (ok_*, real_*) that it must stay silent on.
RULE_TESTS = [
    "tests/test_lint_fixtures.py", "tests/test_lint_registry.py", "tests/test_watch_rule_modules.py",
    "tests/test_lint_docs.py", "--deselect", "tests/test_lint_docs.py::test_demo_lint_part",
    "--deselect", "tests/test_lint_docs.py::test_pre_commit_hook_definition",
    "tests/test_structure.py::test_every_runtime_rule_has_a_module_and_a_script_pair",
    "tests/test_watch_rules.py::test_bad_script_triggers_exactly_its_rule[GG950]",
    "tests/test_watch_rules.py::test_good_twin_is_clean[GG950]",
    "tests/test_watch_rules.py::test_every_runtime_rule_is_covered_and_alone_means_alone",
]


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
                          cwd=root, env=_env(root), capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # two pytest runs and the docs generator in a copy of the repository
def test_adding_a_rule_on_both_sides(tmp_path):
    root = _copy(tmp_path)
    before = _snapshot(root)
    (tmp_path / "example.py").write_text(ENTRY["example"], encoding="utf-8")
    flags = [a for f, text in ENTRY.items() for a in (f"--{f}", "@" + str(tmp_path / "example.py") if f == "example" else text)]
    done = _scaffold(root, "GG950", "zero-learning-rate", "--severity", "warning", *flags)
    assert done.returncode == 0, done.stderr
    scaffolded = _snapshot(root)
    created = sorted(set(scaffolded) - set(before))
    changed = sorted(p for p in before if scaffolded.get(p) != before[p])
    assert created == sorted(set(HAND_WRITTEN) | set(HAND_EDITS)), created
    assert changed == ["README.md", "docs/rules.md", "src/gradguard/rules.py"], changed
    # the entry holds the flags' texts, exactly (read by the copy's own catalogue)
    read = subprocess.run([sys.executable, "-c", "import json, gradguard.rules as r; print(json.dumps(r.RULES['GG950']._asdict()))"],
                          cwd=root, env=_env(root), capture_output=True, text=True, timeout=120)
    entry = __import__("json").loads(read.stdout)
    assert {f: entry[f].strip("\n") for f in ENTRY} == {f: text.strip("\n") for f, text in ENTRY.items()}, read.stderr
    assert (entry["severity"], entry["runtime"], entry["static"]) == ("warning", True, True)

    # the stubs are no rule: every test of the new rule that looks at them fails, naming the stub
    stub = _pytest(root, *RULE_TESTS)
    assert stub.returncode == 1, stub.stdout[-3000:]
    failed = set(re.findall(r"^FAILED (\S+)", stub.stdout, re.M))
    for test in ("test_lint_fixtures.py::test_rule_fixture_with_each_rule_it_marks_alone[gg950_zero_learning_rate_bad]",
                 "test_lint_fixtures.py::test_rule_fixture_with_each_rule_it_marks_alone[gg950_zero_learning_rate_good]",
                 "test_lint_fixtures.py::test_rule_module_is_no_stub[GG950]",
                 "test_lint_registry.py::test_every_rule_has_its_fixture_pair[GG950]",
                 "test_watch_rules.py::test_bad_script_triggers_exactly_its_rule[GG950]",
                 "test_watch_rules.py::test_good_twin_is_clean[GG950]"):
        assert f"tests/{test}" in failed, (test, sorted(failed))
    assert len(failed) == 6, sorted(failed)  # and nothing else: no other rule's test minds the new one
    assert "stub scripts/add_rule.py wrote" in stub.stdout

    # the hand edits: each prepared edit applies exactly once to what the scaffolder left
    by_hand = set()
    for path, edits in HAND_EDITS.items():
        text = (root / path).read_text(encoding="utf-8")
        for pattern, replacement in edits:
            text, n = re.subn(pattern, lambda _: replacement, text, count=1)
            assert n == 1, (path, pattern)
        assert TODO not in text, path
        (root / path).write_text(text, encoding="utf-8")
        by_hand.add(path)
    for path, text in HAND_WRITTEN.items():
        (root / path).write_text(text, encoding="utf-8")
        by_hand.add(path)
    regenerated = subprocess.run([sys.executable, "scripts/gen_rules_md.py"], cwd=root, env=_env(root),
                                 capture_output=True, text=True, timeout=300)
    assert regenerated.returncode == 0, regenerated.stderr

    existing_by_hand = sorted(p for p in by_hand if p in before)
    assert existing_by_hand == []  # the catalogue entry came from the flags
    assert len(by_hand) == 4 <= 5  # both modules and the one program pair both tools check
    after = _snapshot(root)
    assert sorted(p for p in before if after.get(p) != before[p]) == ["README.md", "docs/rules.md", "src/gradguard/rules.py"]
    assert after["src/gradguard/rules.py"] == scaffolded["src/gradguard/rules.py"]  # as the scaffolder wrote it
    # no other rule's fixture, script or corpus program changed
    for folder in ("tests/lint_fixtures/", "tests/watch_scripts/", "tests/lint_corpus/", "tests/rule_pairs/"):
        assert all(after[p] == before[p] for p in before if p.startswith(folder))

    filled = _pytest(root, *RULE_TESTS)
    assert filled.returncode == 0, filled.stdout[-3000:]
    assert "GG950" in _pytest(root, "--co", *RULE_TESTS).stdout  # the new rule's tests were among them
    check = subprocess.run([sys.executable, "scripts/gen_rules_md.py", "--check"], cwd=root, env=_env(root),
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert "| [GG950](docs/rules.md#gg950) | zero-learning-rate | warning | yes | yes |" in readme
