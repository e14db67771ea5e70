"""The rule registry: one module per static rule (check, fix and fixture names in it), each
with a fixture pair, and the registries read from the modules rather than kept by hand."""

import ast
import pkgutil
from pathlib import Path

import pytest

import gradguard as gg
from gradguard.lint import rules

FIXTURES = Path(__file__).parent / "lint_fixtures"
LINT = Path(rules.__file__).parent.parent


def _modules():
    return {m.name: m for m in pkgutil.iter_modules(rules.__path__)}


def test_every_module_is_registered_and_has_a_table_entry():
    registered = {m.__name__.rsplit(".", 1)[1]: m for m in rules.RULE_MODULES}
    assert set(_modules()) == set(registered), "a module in lint/rules/ is not a rule module (ggNNN_name.py)"
    for name, module in registered.items():
        assert name.startswith(module.CODE.lower() + "_"), name
        rule = gg.RULES.get(module.CODE)
        assert rule is not None, f"{name} has no entry in the rule table"
        assert rule.static, f"{module.CODE} has a lint module but is not marked static"
        assert name == f"{module.CODE.lower()}_{rule.name.replace('-', '_')}", name
        assert hasattr(module, "check_loop") or hasattr(module, "check_module") or module.CODE == "GG000"


def test_the_registries_come_from_the_modules():
    assert [c for c, _ in rules.LOOP_RULES] == [m.CODE for m in rules.RULE_MODULES if hasattr(m, "check_loop")]
    assert set(rules.FIXES) == {m.CODE for m in rules.RULE_MODULES if hasattr(m, "fix")}
    assert {"GG101", "GG102", "GG104", "GG105", "GG107", "GG201"} <= set(rules.FIXES)
    # no hand-kept list of rule modules anywhere in the linter
    for path in LINT.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("rules"):
                named = [a.name for a in node.names if a.name.startswith("gg")]
                assert not named, f"{path.name} imports rule modules by name: {named}"


@pytest.mark.parametrize("module", rules.RULE_MODULES, ids=lambda m: m.CODE)
def test_every_rule_has_its_fixture_pair(module):
    bad_name, good_name = module.FIXTURES
    bad, good = FIXTURES / bad_name, FIXTURES / good_name
    assert bad.is_file() and good.is_file(), module.FIXTURES
    assert any(f.code == module.CODE for f in gg.lint_paths([str(bad)])), f"{bad.name} never fires {module.CODE}"
    assert gg.lint_paths([str(good)]) == [], f"{good.name} must give no finding"
    assert "# expect:" not in good.read_text(encoding="utf-8")


def test_every_static_rule_has_a_module():
    codes = {m.CODE for m in rules.RULE_MODULES}
    for code, rule in gg.RULES.items():
        if rule.static:
            assert code in codes, f"{code} is marked static but has no module in gradguard/lint/rules/"


def test_every_fixture_belongs_to_a_rule():
    named = {n for m in rules.RULE_MODULES for n in m.FIXTURES}
    for path in FIXTURES.glob("gg*.py"):
        assert path.name in named, f"{path.name} is named by no rule module's FIXTURES"
