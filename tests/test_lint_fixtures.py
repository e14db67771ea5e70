"""One fixture file per rule (and correct loops), expected findings written inline.

A line ending in ``# expect: GG101`` (or ``# expect: GG101, GG201``) must produce
exactly those findings on that line. A rule's fixture pair (``ggNNN_*_bad.py`` /
``_good.py``, named by its module's ``FIXTURES``) is checked with each rule it marks
alone, and its good twin with its own rule alone: a new rule never has to edit
another rule's fixtures, and a new fixture never waits on another rule's false
positive. Every other fixture (the ``ok_*`` correct training loops from well-known
code, the ``real_*`` programs) is checked with all rules: exactly its marks, the
``ok_*`` ones none at all.

A rule on both sides may instead have one program pair in ``tests/rule_pairs/``
(``ggNNN_<name>_bad.py`` / ``_good.py``, named by its lint module's ``FIXTURES``):
linted here as any rule fixture, and run by tests/test_watch_rules.py.
"""

import re
from pathlib import Path

import pytest

import gradguard as gg
from gradguard.lint.rules import RULE_MODULES

FIXTURES = Path(__file__).parent / "lint_fixtures"
#: One program pair per rule that both tools check: linted here, run by tests/test_watch_rules.py.
PAIRS = Path(__file__).parent / "rule_pairs"
_EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")


def _expected(path: Path) -> set:
    expected = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = _EXPECT.search(line)
        if match:
            expected |= {(number, code.strip()) for code in match.group(1).split(",") if code.strip()}
    return expected


#: The marker scripts/add_rule.py leaves in every stub (written in two parts: no grep finds it here).
SCAFFOLD_TODO = "TODO" + "(add_rule)"
#: fixture file name -> the code of the rule whose pair it is.
OWNER = {name: m.CODE for m in RULE_MODULES for name in m.FIXTURES}


def _check(fixture: Path, found, expected) -> None:
    got = {(f.line, f.code) for f in found}
    assert got == expected, "\n".join(f.format() for f in found) or "no finding"
    for f in found:
        assert f.path == str(fixture)
        assert f.step is None and f.params is None
        assert isinstance(f.col, int) and f.col >= 1  # 1-based, like ruff and SARIF
        assert f.name == gg.RULES[f.code].name and f.severity == gg.RULES[f.code].severity


@pytest.mark.parametrize("fixture", sorted((p for folder in (FIXTURES, PAIRS) for p in folder.glob("*.py") if p.name in OWNER),
                                            key=lambda p: p.name), ids=lambda p: p.stem)
def test_rule_fixture_with_each_rule_it_marks_alone(fixture):
    text = fixture.read_text(encoding="utf-8")
    assert SCAFFOLD_TODO not in text, f"{fixture.name} is still the stub scripts/add_rule.py wrote: fill it"
    expected = _expected(fixture)
    owner = OWNER.get(fixture.name)
    if owner and fixture.name.endswith("_bad.py"):
        assert any(c == owner for _, c in expected), f"{fixture.name} marks no line '# expect: {owner}'"
    # its own rule always (a good twin must be silent under it), and every rule it marks: no mark goes unchecked
    for code in sorted({owner} | {c for _, c in expected}):
        _check(fixture, gg.lint_paths([str(fixture)], select=code), {(n, c) for n, c in expected if c == code})


@pytest.mark.parametrize("module", RULE_MODULES, ids=lambda m: m.CODE)
def test_rule_module_is_no_stub(module):
    assert SCAFFOLD_TODO not in Path(module.__file__).read_text(encoding="utf-8"), \
        f"{Path(module.__file__).name} is still the stub scripts/add_rule.py wrote: fill it"


@pytest.mark.parametrize("fixture", sorted(p for p in FIXTURES.glob("*.py") if p.name not in OWNER), ids=lambda p: p.stem)
def test_program_fixture_with_all_rules(fixture):
    _check(fixture, gg.lint_paths([str(fixture)]), _expected(fixture))


@pytest.mark.slow
def test_a_rule_alone_is_what_is_checked(tmp_path):
    # Negative controls: a good twin that fires its own rule fails; a finding of another rule on it
    # is not its pair's business; a bad fixture whose mark names the wrong line fails.
    bad = (FIXTURES / "gg101_stale_gradient_bad.py").read_text(encoding="utf-8")
    fixture = tmp_path / "gg101_stale_gradient_good.py"
    fixture.write_text(bad.replace("# expect: GG101", ""), encoding="utf-8")
    with pytest.raises(AssertionError):
        test_rule_fixture_with_each_rule_it_marks_alone(fixture)
    fixture.write_text("total = 0\nfor x, y in loader:\n    loss = loss_fn(model(x), y)\n"
                       "    loss.backward()\n    total += loss\n    optimizer.step()\n    optimizer.zero_grad()\n",
                       encoding="utf-8")
    assert {f.code for f in gg.lint_paths([str(fixture)])} == {"GG201"}
    test_rule_fixture_with_each_rule_it_marks_alone(fixture)
    fixture = tmp_path / "gg101_stale_gradient_bad.py"
    fixture.write_text(bad.replace("  # expect: GG101", "", 1).replace("\n", "  # expect: GG101\n", 1), encoding="utf-8")
    with pytest.raises(AssertionError):
        test_rule_fixture_with_each_rule_it_marks_alone(fixture)


def _pair_problems(folder: Path) -> list:
    """What is wrong with the programs of ``folder`` as rule pairs: each must be one half of a pair its
    lint module names, of a rule both tools report, and not also a lint fixture."""
    problems = []
    for path in sorted(folder.glob("*.py")):
        rule = gg.RULES[OWNER[path.name]] if path.name in OWNER else None
        if rule is None:
            problems.append(f"{path.name} in tests/rule_pairs/ is named by no lint rule module's FIXTURES")
        elif not (rule.runtime and rule.static):
            problems.append(f"{path.name}: {rule.code} is not on both sides; its files go to its side's folder")
        elif (FIXTURES / path.name).exists():
            problems.append(f"{path.name} is both in tests/lint_fixtures/ and tests/rule_pairs/")
    return problems


def test_every_rule_pair_serves_both_tools(tmp_path):
    assert _pair_problems(PAIRS) == []
    # negative controls: a program no module names, a one-side rule's fixture, a lint fixture's twin
    one_side = next(name for name, code in OWNER.items() if not gg.RULES[code].runtime)
    for name in ("gg999_nobody_bad.py", one_side, "gg101_stale_gradient_bad.py"):
        (tmp_path / name).write_text("x = 1\n", encoding="utf-8")
    assert len(_pair_problems(tmp_path)) == 3, _pair_problems(tmp_path)


def test_every_static_rule_has_a_fixture_with_a_finding():
    covered = {code for folder in (FIXTURES, PAIRS) for p in folder.glob("gg*.py") for _, code in _expected(p)}
    static = {code for code, rule in gg.RULES.items() if rule.static}
    # GG105, GG106, GG109, GG110 need run-time values (counts, parameter sets)
    assert static <= covered, static - covered


def test_correct_fixtures_exist():
    names = {p.stem for p in FIXTURES.glob("ok_*.py")}
    assert {"ok_mnist", "ok_nanogpt", "ok_dcgan", "ok_word_language_model", "ok_accelerate", "ok_lightning", "ok_hf_trainer", "ok_recipes"} <= names
