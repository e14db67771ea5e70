"""The linter never raises: every .py file of the installed torch package and of the standard library.

These are large, real corpora (torch's own test helpers hold many training loops);
the test asserts that linting finishes without an exception and that any finding
it makes is well-formed. It parses every file once: about a minute on two cores.
"""

import sysconfig
from pathlib import Path

import pytest

from gradguard.lint import iter_python_files, lint_paths
from gradguard.rules import RULES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]  # mostly ast.parse of ~2,300 files on a shared machine


def _lint_tree(root: Path):
    files = list(iter_python_files([str(root)]))
    assert files, root
    findings = lint_paths([str(root)])
    for f in findings:
        assert f.code in RULES and f.path and f.line >= 1 and f.col >= 0
    return files, findings


def test_lint_installed_torch():
    torch_dir = Path(sysconfig.get_paths()["purelib"]) / "torch"
    if not torch_dir.is_dir():
        pytest.skip("torch is not installed in this environment")
    files, findings = _lint_tree(torch_dir)
    assert len(files) > 1000
    # torch's own sources are correct code: at most a handful of findings in its tests
    assert len([f for f in findings if f.code != "GG000"]) <= 5, [f.format() for f in findings]


def test_lint_standard_library():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files, findings = _lint_tree(stdlib)
    assert len(files) > 500
    # the stdlib's test suite holds deliberately broken files (bad encodings, syntax errors)
    assert all(f.code == "GG000" for f in findings), [f.format() for f in findings if f.code != "GG000"]
