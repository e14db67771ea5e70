"""The rule registry: one module per static rule (check, fix and fixture names in it), each
with a fixture pair, and the registries read from the modules rather than kept by hand."""

import ast
import pkgutil
from pathlib import Path

import pytest

import gradguard as gg
from gradguard.lint import rules

FIXTURES = Path(__file__).parent / "lint_fixtures"
#: A rule on both sides may keep its one program pair here instead (tests/test_lint_fixtures.py).
PAIRS = Path(__file__).parent / "rule_pairs"


def _fixture(name: str) -> Path:
    return FIXTURES / name if (FIXTURES / name).is_file() else PAIRS / name
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


@pytest.mark.slow
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
    bad, good = _fixture(bad_name), _fixture(good_name)
    assert bad.is_file() and good.is_file(), module.FIXTURES
    # with its rule alone: another rule's finding on a pair is that rule's business (test_lint_fixtures.py)
    assert any(f.code == module.CODE for f in gg.lint_paths([str(bad)], select=module.CODE)), f"{bad.name} never fires {module.CODE}"
    assert gg.lint_paths([str(good)], select=module.CODE) == [], f"{good.name} must give no {module.CODE} finding"
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


# --- fix safety: declared in each rule module, read by the catalogue -------------------------


@pytest.mark.parametrize("module", rules.RULE_MODULES, ids=lambda m: m.CODE)
def test_fix_safety_is_declared_by_the_module_and_matches_its_fixes(module):
    from gradguard.rules import FIX_APPLICABILITY, fix_availability

    assert hasattr(module, "FIX_SAFETY"), f"{module.CODE}: declare FIX_SAFETY = \"safe\", \"unsafe\" or None at its top"
    declared = module.FIX_SAFETY
    assert declared in ("safe", "unsafe", None), declared
    assert (declared is not None) == hasattr(module, "fix"), f"{module.CODE}: FIX_SAFETY and fix() disagree"
    assert FIX_APPLICABILITY.get(module.CODE) == declared, "the catalogue read another value than the module holds"
    assert fix_availability(module.CODE).startswith(f"Fix: {declared or 'none'} ")
    # what the module declares is what its fixes are: every fix it builds on its bad fixture
    applied = {f.fix.applicability for f in gg.lint_paths([str(_fixture(module.FIXTURES[0]))], select=module.CODE)
               if f.fix is not None}
    assert applied <= {declared}, (module.CODE, applied)
    if declared is not None:
        assert applied, f"{module.CODE} declares a fix but builds none on its bad fixture"


def test_fix_safety_table_is_the_modules_and_no_other(tmp_path, monkeypatch):
    from gradguard import rules as catalogue

    assert dict(catalogue.FIX_APPLICABILITY) == {m.CODE: m.FIX_SAFETY for m in rules.RULE_MODULES if m.FIX_SAFETY}
    # the values the central table held before the modules declared them
    assert dict(catalogue.FIX_APPLICABILITY) == {
        "GG101": "safe", "GG102": "safe", "GG103": "safe", "GG104": "safe", "GG105": "unsafe", "GG107": "safe",
        "GG112": "safe", "GG114": "unsafe", "GG201": "safe"}
    # Negative control: a declaration changed in a module file changes what the catalogue says.
    (tmp_path / "gg101_stale_gradient.py").write_text('CODE = "GG101"\nFIX_SAFETY = "unsafe"  # why\n', encoding="utf-8")
    (tmp_path / "gg108_graph_in_grad.py").write_text("FIX_SAFETY = 'safe'\n", encoding="utf-8")
    (tmp_path / "gg105_unequal_weighting.py").write_text("FIX_SAFETY = None\n", encoding="utf-8")
    monkeypatch.setattr(catalogue, "_LINT_RULES", tmp_path)
    catalogue._fix_safety.cache_clear()
    try:
        assert dict(catalogue.FIX_APPLICABILITY) == {"GG101": "unsafe", "GG108": "safe"}
        assert catalogue.fix_availability("GG105").startswith("Fix: none")
    finally:
        monkeypatch.undo()
        catalogue._fix_safety.cache_clear()
    assert catalogue.FIX_APPLICABILITY["GG105"] == "unsafe"
