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


INFO_ONLY = (
    "import torch\n"
    "def train(model, loader, loss_fn):\n"
    "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
    "    for x, y in loader:\n"
    "        optimizer.zero_grad(set_to_none=False)\n"
    "        loss_fn(model(x), y).backward()\n"
    "        optimizer.step()\n"
)


def test_exit_code_by_severity_and_exit_zero(project, capsys):
    """Any finding exits 1 (an info-only run too, as in ruff); ignoring the code exits 0; --exit-zero: always 0."""
    Path("info.py").write_text(INFO_ONLY)
    assert main(["lint", "info.py"]) == 1
    out = capsys.readouterr().out
    assert "info.py:5:9: GG107" in out and "Found 1 finding (1 info)." in out
    assert main(["lint", "--ignore", "GG107", "info.py"]) == 0
    assert main(["lint", "info.py", "train.py"]) == 1
    assert main(["lint", "--exit-zero", "train.py"]) == 0
    assert "GG101" in capsys.readouterr().out
    assert main(["lint", "--exit-zero", "--select", "GG999", "train.py"]) == 2  # a usage error stays 2
    assert main(["lint", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "exit codes:" in help_text and "--exit-zero" in help_text
    for code, rule in RULES.items():  # every lint rule is listed, from the catalogue
        assert (f"  {code}  {rule.name}" in help_text) == rule.static, code
    assert "GG301" in help_text


def test_github_annotations(project, capsys):
    assert main(["lint", "--format", "github", "train.py"]) == 1
    lines = capsys.readouterr().out.splitlines()
    # the end (exclusive, as ruff writes it) marks `optimizer.step()` and `total += loss`, not the rest of the line
    assert lines[0].startswith("::error title=gradguard (GG101),file=train.py,line=6,col=5,endLine=6,endColumn=21::"
                               "train.py:6:5: GG101 ")
    assert lines[1].startswith("::warning title=gradguard (GG201),file=train.py,line=7,col=5,endLine=7,endColumn=18::")
    assert len(lines) == 2  # annotations only: no summary line for the log to misread
    source = Path("train.py").read_text().splitlines()
    assert source[5][4:20] == "optimizer.step()" and source[6][4:17] == "total += loss"


def test_one_path_form_as_ruff_prints(project, capsys):
    for args in (["."], ["train.py"], ["./train.py"], [str(Path.cwd())]):
        main(["lint", "--select", "GG101", "--no-config", *args])
        line = capsys.readouterr().out.splitlines()[0]
        expected = "train.py:6:5" if not args[0].startswith("/") else f"{Path.cwd()}/train.py:6:5"
        assert line.startswith(expected + ": GG101"), (args, line)


def test_a_mistyped_flag_gets_the_closest_flag_of_its_subcommand(project, capsys):
    assert main(["lint", "--selct", "GG101", "train.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gradguard lint") and "did you mean --select?" in err
    assert main(["run", "--reprt", "r.json", "train.py"]) == 2
    assert "usage: gradguard run" in capsys.readouterr().err


def test_version_short_and_long(capsys):
    from gradguard import __version__

    for flag in ("-V", "--version"):
        assert main([flag]) == 0
        assert capsys.readouterr().out == f"gradguard {__version__}\n"


def test_rule_by_name(capsys):
    assert main(["rule", "stale-gradient"]) == 0
    by_name = capsys.readouterr().out
    assert main(["rule", "GG101"]) == 0
    assert capsys.readouterr().out == by_name and by_name.startswith("GG101 stale-gradient")
    assert main(["rule", "stale-gradiant"]) == 2
    assert "did you mean stale-gradient (GG101)?" in capsys.readouterr().err


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
    assert region == {"startLine": 6, "startColumn": 5, "endLine": 6, "endColumn": 21}
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


# --- files: exclusions, standard input, what is not a Python file ----------------------
def test_default_exclusions_and_flags(project, capsys):
    for folder in (".venv/lib", "build", "node_modules/pkg", "src/__pycache__", "tests/fixtures"):
        (project / folder).mkdir(parents=True)
        (project / folder / "bad.py").write_text(BUGGY)
    Path("clean.py").unlink()
    assert main(["lint", "--select", "GG101", "."]) == 1
    paths = {line.split(":")[0] for line in capsys.readouterr().out.splitlines() if ": GG101 " in line}
    assert paths == {"train.py", "tests/fixtures/bad.py"}  # as ruff prints them, the same as `lint train.py`
    # --extend-exclude adds to the defaults (a name, or a path with a slash)
    assert main(["lint", "--select", "GG101", "--extend-exclude", "tests/fixtures", "."]) == 1
    paths = {line.split(":")[0] for line in capsys.readouterr().out.splitlines() if ": GG101 " in line}
    assert paths == {"train.py"}
    assert main(["lint", "--extend-exclude", "fixtures,train.py", "."]) == 0
    # --exclude replaces them: build/ is checked again
    assert main(["lint", "--select", "GG101", "--exclude", "tests", "."]) == 1
    out = capsys.readouterr().out
    assert "build/bad.py:6:5" in out and ".venv/lib/bad.py" in out and "tests/" not in out
    # a file named on the command line is checked unless --force-exclude (pre-commit's case)
    assert main(["lint", "--select", "GG101", "build/bad.py"]) == 1
    assert "build/bad.py:6:5: GG101" in capsys.readouterr().out
    assert main(["lint", "--force-exclude", "build/bad.py"]) == 0
    assert "excluded" in capsys.readouterr().err
    assert main(["lint", "--force-exclude", "--select", "GG101", ".", "train.py"]) == 1  # '.' itself is not hidden
    assert "train.py:6:5" in capsys.readouterr().out


def test_build_and_dist_are_skipped_only_at_a_project_root(project, capsys):
    """`build/` and `dist/` of a project root are build output; a source package of that name
    inside a package (or a sub-project's own build output) is told apart."""
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for folder in ("build/lib/pkg", "dist", "pkg/build", "src/pkg/dist", "sub/build"):
        (project / folder).mkdir(parents=True)
        (project / folder / "bad.py").write_text(BUGGY)
    (project / "sub" / "setup.py").write_text("")  # a sub-project: its build/ is output too
    for package in ("pkg", "pkg/build", "src/pkg", "src/pkg/dist"):
        (project / package / "__init__.py").write_text("")
    assert main(["lint", "--select", "GG101", "."]) == 1
    paths = {line.split(":")[0] for line in capsys.readouterr().out.splitlines() if ": GG101 " in line}
    assert paths == {"train.py", "pkg/build/bad.py", "src/pkg/dist/bad.py"}
    # naming the package (no project marker there) checks its build/ subpackage too
    assert main(["lint", "--select", "GG101", "pkg"]) == 1
    assert "pkg/build/bad.py:6:5" in capsys.readouterr().out
    # a folder without a marker named on the command line is a root: its build/ (no package) is output
    (project / "tool" / "build").mkdir(parents=True)
    (project / "tool" / "build" / "bad.py").write_text(BUGGY)
    assert main(["lint", "--select", "GG101", "tool"]) == 0
    capsys.readouterr()
    # --force-exclude (pre-commit names every file) follows the same rule
    assert main(["lint", "--force-exclude", "--select", "GG101", "pkg/build/bad.py", "build/lib/pkg/bad.py"]) == 1
    out = capsys.readouterr().out
    assert "pkg/build/bad.py:6:5" in out and "build/lib" not in out


def test_exclusions_from_pyproject(project, capsys):
    (project / "tests" / "fixtures").mkdir(parents=True)
    (project / "tests" / "fixtures" / "bad.py").write_text(BUGGY)
    (project / "gen").mkdir()
    (project / "gen" / "x_pb2.py").write_text(BUGGY)
    (project / "pyproject.toml").write_text('[tool.gradguard]\nextend-exclude = ["tests/fixtures", "*_pb2.py"]\n')
    assert main(["lint", "--select", "GG101", "."]) == 1
    out = capsys.readouterr().out
    assert "train.py:" in out and "fixtures" not in out and "pb2" not in out
    # patterns with a slash count from the pyproject.toml's folder, wherever lint runs from
    import os

    os.chdir(project / "tests")
    assert main(["lint", "."]) == 0
    assert "no Python files found under '.'" in capsys.readouterr().err  # all excluded
    os.chdir(project)
    # the flag replaces the configured exclude
    (project / "pyproject.toml").write_text('[tool.gradguard]\nexclude = ["tests", "gen"]\n')
    assert main(["lint", "--select", "GG101", "."]) == 1
    out = capsys.readouterr().out
    assert "fixtures" not in out and "pb2" not in out
    assert main(["lint", "--select", "GG101", "--exclude", "gen", "."]) == 1
    assert "tests/fixtures/bad.py" in capsys.readouterr().out


@pytest.mark.slow  # lints the whole repository
def test_this_repository_excludes_its_own_buggy_inputs(capsys, monkeypatch):
    """`gradguard lint .` here reports nothing: the files that hold bugs on purpose are excluded."""
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    main(["lint", "--no-progress", "--format", "json", "."])
    found = json.loads(capsys.readouterr().out)
    # The rest (the library, the tests' correct loops, the 50-odd correct programs of the recall
    # corpus) holds no gradient-buffer bug either: a finding here is a false positive to fix.
    assert found == [], [f"{d['path']}:{d['line']}: {d['code']}" for d in found]
    assert main(["lint", "--select", "GG101", "tests/lint_fixtures/gg101_stale_gradient_bad.py"]) == 1  # named: checked


def test_a_file_named_twice_is_checked_once(project, capsys):
    assert main(["lint", ".", "train.py", "./train.py", "--no-progress"]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if "train.py:" in line]
    assert len(lines) == 2 and ": GG101 " in lines[0] and ": GG201 " in lines[1], lines


def test_stdin(project, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(BUGGY.encode())))
    assert main(["lint", "-", "--stdin-filename", "src/train.py"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("src/train.py:6:5: GG101 ")
    # the configuration is found from the displayed path; without one the path shows as '-'
    (project / "pyproject.toml").write_text('[tool.gradguard]\nignore = ["GG101"]\n')
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(BUGGY.encode())))
    assert main(["lint", "-"]) == 1
    out = capsys.readouterr().out
    assert "-:7:5: GG201" in out and "GG101" not in out
    assert main(["lint", "-", "train.py"]) == 2
    assert main(["lint", "--stdin-filename", "x.py", "train.py"]) == 2


def test_no_python_files_is_a_warning_not_no_findings(project, capsys):
    (project / "docs").mkdir()
    (project / "docs" / "notes.txt").write_text(BUGGY)
    assert main(["lint", "docs"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "no Python files found under 'docs'" in err
    assert main(["lint", "docs", "train.py"]) == 1  # the other paths are still checked
    out, err = capsys.readouterr()
    assert "train.py:6:5: GG101" in out and "no Python files found under 'docs'" in err


@pytest.mark.slow
def test_fifo_in_a_folder_is_skipped_and_named_fifo_or_link_is_explained(project):
    """Reading a named pipe would wait forever: the walk skips it with a note (bounded in time here)."""
    import os
    import subprocess
    import sys

    os.mkfifo(project / "x.py")
    run = [sys.executable, "-m", "gradguard", "lint", "--no-config"]
    done = subprocess.run(run + ["."], capture_output=True, text=True, timeout=120, cwd=project)
    assert done.returncode == 1 and "train.py:6:5: GG101" in done.stdout
    assert "skipped './x.py': a named pipe (FIFO)" in done.stderr
    done = subprocess.run(run + ["x.py"], capture_output=True, text=True, timeout=120, cwd=project)
    assert done.returncode == 2 and "named pipe" in done.stderr and "no such file" not in done.stderr


def test_symlink_messages(project, capsys):
    import os

    os.symlink("loop.py", project / "loop.py")
    os.symlink("gone.py", project / "dangling.py")
    assert main(["lint", "loop.py"]) == 2
    assert "symbolic link that loops" in capsys.readouterr().err
    assert main(["lint", "dangling.py"]) == 2
    assert "symbolic link to 'gone.py', which does not exist" in capsys.readouterr().err
    assert main(["lint", "--select", "GG101", "."]) == 1  # in a folder: skipped with a note
    out, err = capsys.readouterr()
    assert out.startswith("train.py:6:5") and "skipped './dangling.py'" in err and "skipped './loop.py'" in err


def test_unreadable_file_advice_is_not_about_syntax(project):
    from gradguard.lint import lint_files

    (finding,) = lint_files(["vanished.py"], frozenset({"GG000"}))
    assert finding.code == "GG000" and "cannot read this file" in finding.message
    assert "syntax" not in finding.message and "readable" in finding.message
    assert (finding.line, finding.col) == (1, 1)


def test_non_utf8_file_name(tmp_path, capsys):
    import os

    if os.uname().sysname == "Darwin":  # pragma: no cover - macOS file names are always UTF-8
        pytest.skip("macOS refuses file names that are not UTF-8")
    folder = os.fsencode(tmp_path) + b"/caf\xe9"
    os.mkdir(folder)
    with open(folder + b"/tr\xe9in.py", "w") as fh:
        fh.write(BUGGY)
    shown = os.fsdecode(folder)
    assert main(["lint", "--format", "sarif", shown]) == 1
    log = json.loads(capsys.readouterr().out)
    uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri.startswith("file:///") and uri.endswith("/caf%E9/tr%E9in.py")
    assert main(["lint", shown]) == 1  # text: escaped, not a crash
    assert "caf\\udce9/tr\\udce9in.py:6:5: GG101" in capsys.readouterr().out


# --- configuration and suppression messages --------------------------------------------
def test_config_errors_name_file_and_key(project, capsys):
    (project / "pyproject.toml").write_text('[tool.gradguard]\nselect = ["GG1", "GG999"]\n')
    assert main(["lint", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "pyproject.toml: [tool.gradguard] select: unknown rule code 'GG999'" in err
    (project / "pyproject.toml").write_text('[tool.gradguard]\nexclude = "build"\nextend_exclude = ["x"]\n')
    assert main(["lint", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "pyproject.toml: [tool.gradguard] extend_exclude: unknown key (did you mean 'extend-exclude'?)" in err
    (project / "pyproject.toml").write_text('[tool.gradguard]\nignore = [101]\n')
    assert main(["lint", "train.py"]) == 2
    assert "pyproject.toml: [tool.gradguard] ignore: must be a list of rule codes" in capsys.readouterr().err
    assert main(["lint", "--no-config", "--ignore", "GG1,GG777", "train.py"]) == 2
    assert "--ignore: unknown rule code 'GG777'" in capsys.readouterr().err


def test_unknown_code_in_suppression_comment_is_warned(project, capsys):
    Path("s.py").write_text(BUGGY.replace("optimizer.step()", "optimizer.step()  # gradguard: ignore[GG1O1]"))
    assert main(["lint", "--select", "GG101", "s.py"]) == 1  # the typo silences nothing
    out, err = capsys.readouterr()
    assert "s.py:6:5: GG101" in out
    assert "s.py:6: unknown rule code 'GG1O1'" in err
    Path("ok.py").write_text(BUGGY.replace("optimizer.step()", "optimizer.step()  # gradguard: ignore[GG1]"))
    assert main(["lint", "--select", "GG101", "ok.py"]) == 0
    assert capsys.readouterr().err == ""


# --- output to a closed pipe, help texts ---------------------------------------------
@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_broken_pipe_exits_quietly(project):
    """`gradguard lint src | head -1`: no BrokenPipeError traceback."""
    import subprocess
    import sys

    for i in range(200):
        (project / f"t{i}.py").write_text(BUGGY)
    proc = subprocess.Popen([sys.executable, "-m", "gradguard", "lint", "--no-progress", "."],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=project)
    proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does after its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert err == ""


@pytest.mark.parametrize("command", ["lint", "run", "plan", "rule", "demo", None])
def test_help_texts_speak_to_users(command, capsys):
    import re

    assert main([command, "--help"] if command else ["--help"]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"SPEC|\bissue\b|§|<owner>|example\.com|pypi\.org", out), out
