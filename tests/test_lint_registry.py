"""The rule registry: one module per static rule, each with a fixture that fires, and no module without a rule."""

import pkgutil
from pathlib import Path

import gradguard as gg
from gradguard.lint import rules

FIXTURES = Path(__file__).parent / "lint_fixtures"


def _modules():
    return {m.name: m for m in pkgutil.iter_modules(rules.__path__)}


def test_every_module_is_registered_and_has_a_table_entry():
    registered = {m.__name__.rsplit(".", 1)[1]: m for m in rules.RULE_MODULES}
    assert set(_modules()) == set(registered), "a rule module is missing from RULE_MODULES (or the reverse)"
    for name, module in registered.items():
        assert name.startswith(module.CODE.lower() + "_"), name
        rule = gg.RULES.get(module.CODE)
        assert rule is not None, f"{name} has no entry in the rule table"
        assert rule.static, f"{module.CODE} has a lint module but is not marked static"
        assert name == f"{module.CODE.lower()}_{rule.name.replace('-', '_')}", name
        assert hasattr(module, "check_loop") or hasattr(module, "check_module") or module.CODE == "GG000"


def test_every_static_rule_has_a_module_and_a_firing_fixture():
    codes = {m.CODE for m in rules.RULE_MODULES}
    fixtures = {p.stem.split("_", 1)[0].upper() for p in FIXTURES.glob("gg*.py")}
    for code, rule in gg.RULES.items():
        if rule.static:
            assert code in codes, f"{code} is marked static but has no module in gradguard/lint/rules/"
            assert code in fixtures, f"{code} is marked static but has no tests/lint_fixtures/{code.lower()}_*.py"
            fixture = next(FIXTURES.glob(f"{code.lower()}_*.py"))
            assert any(f.code == code for f in gg.lint_paths([str(fixture)])), f"{fixture.name} never fires {code}"
