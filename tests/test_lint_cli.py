"""``gradguard lint`` and ``gradguard rule``: output formats, exit codes, configuration."""

import json
import textwrap
from pathlib import Path

import pytest

from gradguard import RULES
from gradguard.cli import main
from gradguard.findings import JSON_KEYS

BUGGY = textwrap.dedent(
    """
    total = 0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss
    """
)
CLEAN = "for x in loader:\n    optimizer.zero_grad()\n    model(x).backward()\n    optimizer.step()\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def test_text_output_ruff_style(project, capsys):
    """One short line per finding, 1-based columns (editors jump to `optimizer`), the fix one command away."""
    assert main(["lint", "train.py"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "train.py:6:5: GG101 `optimizer.step()` reuses gradients an earlier step already applied"
    assert lines[1].startswith("train.py:7:5: GG201 `total` accumulates the loss tensor")
    assert BUGGY.splitlines()[6 - 1][5 - 1:].startswith("optimizer.step()")
    for line in lines[:2]:
        assert len(line) < 120 and RULES[line.split()[1]].fix not in line
    assert lines[2] == "Found 2 findings (1 error, 1 warning)."
    assert "gradguard rule GG101" in lines[3]


def test_full_output_format_keeps_consequence_and_fix(project, capsys):
    assert main(["lint", "--output-format", "full", "train.py"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("train.py:6:5: GG101 `optimizer.step()` reuses gradients")
    assert lines[0].endswith(RULES["GG101"].fix) and RULES["GG101"].consequence in lines[0]
    assert lines[-1] == "Found 2 findings (1 error, 1 warning)."
    assert main(["lint", "--format", "text", "train.py"]) == 1  # the old name of the concise form
    assert len(capsys.readouterr().out.splitlines()[0]) < 120


def test_statistics(project, capsys):
    Path("more.py").write_text(BUGGY)
    assert main(["lint", "--statistics", "train.py", "more.py"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == ["2\tGG101\tstale-gradient", "2\tGG201\tgraph-kept-by-logging", "Found 4 findings (2 errors, 2 warnings)."]
    assert main(["lint", "--statistics", "--format", "json", "train.py", "clean.py"]) == 1
    assert json.loads(capsys.readouterr().out) == [
        {"code": "GG101", "name": "stale-gradient", "count": 1},
        {"code": "GG201", "name": "graph-kept-by-logging", "count": 1},
    ]
    assert main(["lint", "--statistics", "--format", "sarif", "train.py"]) == 2


def test_clean_exit_zero(project, capsys):
    assert main(["lint", "clean.py"]) == 0
    assert capsys.readouterr().out.strip() == "No findings."


def test_default_path_is_current_folder(project, capsys):
    assert main(["lint"]) == 1
    assert "train.py:6:5: GG101" in capsys.readouterr().out


def test_json_output(project, capsys):
    assert main(["lint", "--format", "json", "train.py", "clean.py"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [d["code"] for d in data] == ["GG101", "GG201"]
    for d in data:
        assert tuple(d) == JSON_KEYS
        assert d["path"] == "train.py" and d["step"] is None and d["params"] is None


def test_sarif_output(project, capsys):
    assert main(["lint", "--format", "sarif", "train.py"]) == 1
    log = json.loads(capsys.readouterr().out)
    assert log["version"] == "2.1.0"
    results = log["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["GG101", "GG201"]
    region = results[0]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 6, "startColumn": 5}
    assert results[0]["level"] == "error" and results[1]["level"] == "warning"


def test_select_ignore(project, capsys):
    assert main(["lint", "--select", "GG2", "train.py"]) == 1
    assert "GG101" not in capsys.readouterr().out
    assert main(["lint", "--ignore", "GG101,GG201", "train.py"]) == 0


def test_usage_errors(project, capsys):
    assert main(["lint", "missing.py"]) == 2
    assert "missing.py" in capsys.readouterr().err
    assert main(["lint", "--select", "GG999", "train.py"]) == 2
    assert "GG999" in capsys.readouterr().err
    assert main(["lint", "--format", "xml", "train.py"]) == 2


def test_syntax_error_reported_and_rest_checked(project, capsys):
    Path("broken.py").write_text("for x in y\n    pass\n")
    assert main(["lint", "broken.py", "train.py"]) == 1
    out = capsys.readouterr().out
    assert "broken.py:1:11: GG000" in out and "train.py:6:5: GG101" in out


def test_pyproject_config_and_cli_wins(project, capsys):
    sub = project / "sub"
    sub.mkdir()
    (sub / "train.py").write_text(BUGGY)
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.gradguard]\nignore = ["GG201"]\n')
    assert main(["lint", "sub/train.py"]) == 1
    out = capsys.readouterr().out
    assert "GG101" in out and "GG201" not in out
    # the flag replaces the configured list
    assert main(["lint", "--ignore", "GG101", "sub/train.py"]) == 1
    out = capsys.readouterr().out
    assert "GG201" in out and "GG101" not in out
    (project / "pyproject.toml").write_text('[tool.gradguard]\nselect = ["GG2"]\n')
    assert main(["lint", "sub/train.py"]) == 1
    assert "GG101" not in capsys.readouterr().out
    assert main(["lint", "--no-config", "sub/train.py"]) == 1
    assert "GG101" in capsys.readouterr().out


def test_flag_select_beats_config_ignore(project, capsys):
    # config ignore + flag select: the code asked for on the command line is reported
    (project / "pyproject.toml").write_text('[tool.gradguard]\nignore = ["GG101"]\n')
    assert main(["lint", "train.py"]) == 1
    assert "GG101" not in capsys.readouterr().out
    assert main(["lint", "--select", "GG101", "train.py"]) == 1
    out = capsys.readouterr().out
    assert "train.py:6:5: GG101" in out and "GG201" not in out
    # a broader configured ignore does not hide an explicitly selected code either
    (project / "pyproject.toml").write_text('[tool.gradguard]\nignore = ["GG1", "GG2"]\n')
    assert main(["lint", "train.py"]) == 0
    capsys.readouterr()
    assert main(["lint", "--select", "gg101", "train.py"]) == 1
    assert "GG101" in capsys.readouterr().out
    # a configured ignore narrower than the --select entry still applies
    (project / "pyproject.toml").write_text('[tool.gradguard]\nignore = ["GG201"]\n')
    assert main(["lint", "--select", "GG", "train.py"]) == 1
    out = capsys.readouterr().out
    assert "GG101" in out and "GG201" not in out
    # both flags: the configuration is not used at all
    assert main(["lint", "--select", "GG201", "--ignore", "GG101", "train.py"]) == 1
    assert "GG201" in capsys.readouterr().out


def test_flag_ignore_beats_config_select(project, capsys):
    # config select + flag ignore: the flag's ignore applies within the configured select
    (project / "pyproject.toml").write_text('[tool.gradguard]\nselect = ["GG101", "GG201"]\n')
    assert main(["lint", "--ignore", "GG101", "train.py"]) == 1
    out = capsys.readouterr().out
    assert "GG201" in out and "GG101" not in out
    assert main(["lint", "--ignore", "GG101,GG201", "train.py"]) == 0
    assert capsys.readouterr().out.strip() == "No findings."
    # a flag --ignore replaces a configured ignore (it does not add to it)
    (project / "pyproject.toml").write_text('[tool.gradguard]\nselect = ["GG1", "GG2"]\nignore = ["GG101"]\n')
    assert main(["lint", "--ignore", "GG201", "train.py"]) == 1
    out = capsys.readouterr().out
    assert "GG101" in out and "GG201" not in out


def test_bad_config_is_a_usage_error(project, capsys):
    (project / "pyproject.toml").write_text('[tool.gradguard]\nignore = ["GG999"]\n')
    assert main(["lint", "train.py"]) == 2
    (project / "pyproject.toml").write_text('[tool.gradguard]\nselct = ["GG1"]\n')
    assert main(["lint", "train.py"]) == 2
    assert "selct" in capsys.readouterr().err


def test_suppression_in_cli(project, capsys):
    Path("s.py").write_text(BUGGY.replace("optimizer.step()", "optimizer.step()  # gradguard: ignore[GG101]"))
    assert main(["lint", "--select", "GG101", "s.py"]) == 0


def test_lint_help_has_example(capsys):
    assert main(["lint", "--help"]) == 0
    assert "gradguard lint train.py" in capsys.readouterr().out


# --- gradguard rule --------------------------------------------------------------------
@pytest.mark.parametrize("code", list(RULES))
def test_rule_explains(code, capsys):
    assert main(["rule", code.lower()]) == 0
    out = capsys.readouterr().out
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
        assert heading in out
    assert out == RULES[code].explanation


def test_rule_unknown_and_list(capsys):
    assert main(["rule", "GG999"]) == 2
    assert "GG999" in capsys.readouterr().err
    assert main(["rule"]) == 0
    out = capsys.readouterr().out
    assert all(code in out for code in RULES)
    assert main(["rule", "--help"]) == 0
    assert "gradguard rule GG101" in capsys.readouterr().out
