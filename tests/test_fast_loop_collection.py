"""The fast loop (``-m "not slow"``) does not import what only slow tests need (tests/conftest.py)."""

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
# By its path: another conftest.py (tests/lint_corpus) may be the module named "conftest" in a whole run.
_spec = importlib.util.spec_from_file_location("gradguard_tests_conftest", ROOT / "tests" / "conftest.py")
conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conftest)


def _config(markexpr):
    return SimpleNamespace(getoption=lambda name, default=None: markexpr if name == "markexpr" else default)


@pytest.mark.parametrize("expr,deselected", [
    ("not slow", True), ("not slow and not gpu", True), ("not (slow or bench)", True),
    ("slow", False), ("", False), ("gpu", False), ("gpu or not slow", False), ("not gpu", False),
])
def test_a_run_skips_slow_only_modules_only_when_its_expression_deselects_every_slow_test(expr, deselected):
    assert conftest._slow_deselected(_config(expr)) is deselected


def test_what_needs_a_framework_is_read_from_the_source():
    src = ROOT / "src" / "gradguard"
    assert conftest._needs_extra(src / "integrations" / "lightning" / "exact.py")  # imports lightning
    assert conftest._needs_extra(src / "integrations" / "lightning" / "__init__.py")  # through .exact
    assert not conftest._needs_extra(src / "accumulate.py")  # torch and gradguard only
    assert not conftest._needs_extra(src / "integrations" / "__init__.py")
    marked = ast.parse((ROOT / "tests" / "test_integrations_lightning.py").read_text())
    assert conftest._module_is_marked_slow(marked)
    assert not conftest._module_is_marked_slow(ast.parse((ROOT / "tests" / "test_accumulate_exact.py").read_text()))
    assert not conftest._module_is_marked_slow(ast.parse("pytestmark = pytest.mark.gpu\n"))
    assert conftest._module_is_marked_slow(ast.parse("pytestmark = [pytest.mark.gpu, pytest.mark.slow]\n"))


@pytest.mark.slow
def test_the_fast_loop_does_not_import_the_slow_only_modules():
    paths = ["tests/test_integrations_lightning.py", "src/gradguard/integrations/lightning"]

    def collected(*args):
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              *args, *paths], cwd=ROOT, capture_output=True, text=True, timeout=600)
        return [line for line in out.stdout.splitlines() if "::" in line]

    assert collected("-m", "not slow") == []
    every = collected()  # the negative control: without -m, the tests and the docstring examples are there
    assert any(n.startswith("tests/") for n in every) and any(n.startswith("src/") for n in every)
