"""A configuration file that cannot be read is one line naming it and the problem, exit 2, never a traceback."""

from __future__ import annotations

import os

import pytest

from gradguard.cli import main

CLEAN = "x = 1\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.py").write_text(CLEAN)
    return tmp_path


def lint_error(capsys) -> str:
    assert main(["lint", "ok.py"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("text", [
    b'[tool.gradguard]\nselect = ["GG1"]\n# caf\xe9 in Latin-1\n',
    b"\xff\xfe[\x00t\x00o\x00o\x00l\x00]\x00\n\x00",  # UTF-16, as some editors save it
])
def test_a_pyproject_that_is_not_utf8(project, capsys, text):
    (project / "pyproject.toml").write_bytes(text)
    err = lint_error(capsys)
    assert err.startswith("gradguard lint: error: pyproject.toml: not UTF-8") and "must be UTF-8" in err


def test_a_pyproject_that_is_not_toml(project, capsys):
    (project / "pyproject.toml").write_text('[tool.gradguard]\nselect = ["GG1"\n')
    err = lint_error(capsys)
    assert err.startswith("gradguard lint: error: pyproject.toml: cannot read [tool.gradguard]")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_a_pyproject_that_cannot_be_read(project, capsys):
    path = project / "pyproject.toml"
    path.write_text('[tool.gradguard]\nselect = ["GG1"]\n')
    path.chmod(0)
    try:
        err = lint_error(capsys)
    finally:
        path.chmod(0o644)
    assert err.startswith("gradguard lint: error: pyproject.toml: cannot read it: Permission denied")


def test_a_readable_config_still_applies(project, capsys):
    """Negative control: the same file, in UTF-8 (with a non-ASCII comment), is read and used."""
    (project / "pyproject.toml").write_text('[tool.gradguard]\nselect = ["GG1"]\n# café\n', encoding="utf-8")
    assert main(["lint", "ok.py"]) == 0
    (project / "pyproject.toml").write_text('[tool.gradguard]\nselect = ["GG999"]\n', encoding="utf-8")
    assert main(["lint", "ok.py"]) == 2
