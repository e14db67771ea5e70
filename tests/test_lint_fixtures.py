"""One fixture file per rule (and correct loops), expected findings written inline.

A line ending in ``# expect: GG101`` (or ``# expect: GG101, GG201``) must produce
exactly those findings on that line; every other line must produce none. The
``ok_*`` fixtures are correct training loops from well-known code: zero findings.
"""

import re
from pathlib import Path

import pytest

import gradguard as gg

FIXTURES = Path(__file__).parent / "lint_fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")


def _expected(path: Path) -> set:
    expected = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = _EXPECT.search(line)
        if match:
            expected |= {(number, code.strip()) for code in match.group(1).split(",") if code.strip()}
    return expected


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.py")), ids=lambda p: p.stem)
def test_fixture(fixture):
    found = gg.lint_paths([str(fixture)])
    got = {(f.line, f.code) for f in found}
    assert got == _expected(fixture), "\n".join(f.format() for f in found)
    for f in found:
        assert f.path == str(fixture)
        assert f.step is None and f.params is None
        assert isinstance(f.col, int) and f.col >= 1  # 1-based, like ruff and SARIF
        assert f.name == gg.RULES[f.code].name and f.severity == gg.RULES[f.code].severity


def test_every_static_rule_has_a_fixture_with_a_finding():
    covered = {code for p in FIXTURES.glob("gg*.py") for _, code in _expected(p)}
    static = {code for code, rule in gg.RULES.items() if rule.static}
    # GG105, GG106, GG109, GG110 need run-time values (counts, parameter sets)
    assert static <= covered, static - covered


def test_correct_fixtures_exist():
    names = {p.stem for p in FIXTURES.glob("ok_*.py")}
    assert {"ok_mnist", "ok_nanogpt", "ok_dcgan", "ok_word_language_model", "ok_accelerate", "ok_lightning", "ok_hf_trainer", "ok_recipes"} <= names
