"""ruff's and flake8's conventions in `gradguard lint`: `# noqa: GG101`, `extend-select`,
`per-file-ignores`, `-q/--quiet`, `--show-fixes`, `--add-noqa`.

Each check compares with the same file or run without the convention (the finding is there), so
that a convention that silenced everything, or nothing, fails.
"""

import ast
import os
import textwrap
from pathlib import Path

import pytest

from gradguard import lint_source
from gradguard.cli import main

BUGGY = textwrap.dedent(
    """\
    total = 0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss
    """
)  # GG101 at 5:5 (optimizer.step()), GG201 at 6:5 (total += loss)
STEP = "    optimizer.step()\n"


def codes(source, **kw):
    return [f.code for f in lint_source(source, "t.py", notify=lambda note: None, **kw)]


def with_comment(comment):
    return BUGGY.replace(STEP, STEP.rstrip("\n") + "  " + comment + "\n")


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return tmp_path


def configure(project, text):
    (project / "pyproject.toml").write_text("[tool.gradguard]\n" + textwrap.dedent(text))


# --------------------------------------------------------------------------------------- noqa

@pytest.mark.parametrize("comment", [
    "# noqa: GG101", "# noqa:GG101", "# NOQA: gg101", "# noqa: E501, GG101", "# noqa: E501,GG101 GG104 the reason",
    "# noqa: GG1", "# type: ignore  # noqa: GG101", "# gradguard: ignore[GG201]  # noqa: GG101",
    "# noqa  # noqa: GG101",
])
def test_noqa_with_codes_silences_them(comment):
    assert codes(BUGGY) == ["GG101", "GG201"]  # without the comment
    assert codes(with_comment(comment)) == ["GG201"], comment


@pytest.mark.parametrize("comment", [
    "# noqa", "# NOQA", "# noqa: E501", "# noqa: GG102", "# noqa:", "# noqa GG101", "# noqa-GG101", "# noqa: GG1O1",
    "# noqa E501: GG101",
])
def test_what_a_noqa_does_not_silence(comment):
    assert codes(with_comment(comment)) == ["GG101", "GG201"], comment


def test_a_code_quoted_in_prose_keeps_its_code(project, capsys):
    """`# see `# noqa: GG101`, ...`: the closing backtick is prose, not part of the code (no unknown-code warning)."""
    Path("t.py").write_text(with_comment("# `# noqa: GG101`, as the linter reads it"))
    assert main(["lint", "t.py"]) == 1
    captured = capsys.readouterr()
    assert "unknown rule code" not in captured.err and "GG101" not in captured.out and "t.py:6:5: GG201" in captured.out
    Path("u.py").write_text(with_comment("# `# noqa: GG1O1`, a typo"))  # control: a mistyped code is still named
    assert main(["lint", "u.py"]) == 1 and "unknown rule code 'GG1O1'" in capsys.readouterr().err


def test_noqa_only_in_a_comment_and_only_on_its_line():
    assert codes(BUGGY.replace(STEP, "    optimizer.step('# noqa: GG101')\n")) == ["GG101", "GG201"]
    assert codes(BUGGY.replace("    loss.backward()\n", "    loss.backward()  # noqa: GG101\n")) == ["GG101", "GG201"]


def test_a_blanket_noqa_silences_only_when_configured(project, capsys):
    Path("t.py").write_text(with_comment("# noqa"))
    assert main(["lint", "t.py"]) == 1 and "t.py:5:5: GG101" in capsys.readouterr().out
    configure(project, "blanket-noqa = true\n")
    assert main(["lint", "t.py"]) == 1
    out = capsys.readouterr().out
    assert "GG101" not in out and "t.py:6:5: GG201" in out
    assert codes(with_comment("# noqa"), blanket_noqa=True) == ["GG201"]
    configure(project, "blanket-noqa = 'yes'\n")
    assert main(["lint", "t.py"]) == 2
    assert "blanket-noqa: must be true or false" in capsys.readouterr().err


def test_noqa_mistakes_are_reported(project, capsys):
    Path("a.py").write_text(with_comment("# noqa GG101"))
    Path("b.py").write_text(with_comment("# noqa: GG1O1, E501"))
    assert main(["lint", "a.py", "b.py"]) == 1
    captured = capsys.readouterr()
    assert "a.py:5: '# noqa GG101' has no colon" in captured.err and "write '# noqa: GG101'" in captured.err
    assert "b.py:5: unknown rule code 'GG1O1'" in captured.err and "E501" not in captured.err
    assert captured.out.count(": GG101 ") == 2  # neither silenced anything


# --------------------------------------------------------------------------------- selection

def test_extend_select_adds_to_the_selection(project, capsys):
    Path("t.py").write_text(BUGGY)

    def found(*flags):
        main(["lint", "--format", "json", *flags, "t.py"])
        import json
        return sorted(d["code"] for d in json.loads(capsys.readouterr().out))

    configure(project, 'select = ["GG2"]\n')
    assert found() == ["GG201"]
    configure(project, 'select = ["GG2"]\nextend-select = ["GG101"]\n')
    assert found() == ["GG101", "GG201"]
    assert found("--select", "GG201") == ["GG201"]  # --select replaces select and extend-select
    assert found("--select", "GG201", "--extend-select", "GG1") == ["GG101", "GG201"]
    configure(project, 'select = ["GG2"]\n')
    assert found("--extend-select", "GG101") == ["GG101", "GG201"]
    configure(project, 'ignore = ["GG1"]\n')
    assert found() == ["GG201"] and found("--extend-select", "GG101") == ["GG101", "GG201"]  # the flag beats it
    assert main(["lint", "--extend-select", "GG999", "t.py"]) == 2
    assert "--extend-select: unknown rule code 'GG999'" in capsys.readouterr().err
    configure(project, 'extend-select = ["GG9"]\n')
    assert main(["lint", "t.py"]) == 2 and "extend-select" in capsys.readouterr().err


def _layout(project):
    (project / "tests" / "unit").mkdir(parents=True)
    for path in ("train.py", "tests/unit/test_loop.py", "tests/helper.py"):
        (project / path).write_text(BUGGY)


def _reported(capsys):
    """(path, code) of each finding printed."""
    return sorted((line.split(":")[0], line.split(": ")[1].split()[0])
                  for line in capsys.readouterr().out.splitlines() if ": GG" in line)


def test_per_file_ignores_from_the_configuration(project, capsys):
    _layout(project)
    configure(project, """\
        [tool.gradguard.per-file-ignores]
        "tests/*" = ["GG101"]
        "!train.py" = ["GG201"]
        """)
    assert main(["lint", "."]) == 1
    # tests/: no GG101; every file but train.py: no GG201
    assert _reported(capsys) == [("train.py", "GG101"), ("train.py", "GG201")]
    assert main(["lint", "--no-config", "."]) == 1 and len(_reported(capsys)) == 6  # without them
    # from inside a sub-folder the patterns still count from the pyproject.toml's folder
    os.chdir(project / "tests")
    assert main(["lint", "."]) == 0 and _reported(capsys) == []
    os.chdir(project)
    configure(project, """\
        extend-per-file-ignores = { "test_*.py" = ["GG2"] }
        [tool.gradguard.per-file-ignores]
        "tests" = ["GG101"]
        """)
    main(["lint", "."])
    assert _reported(capsys) == [("tests/helper.py", "GG201"), ("train.py", "GG101"), ("train.py", "GG201")]


def test_per_file_ignores_flags(project, capsys):
    _layout(project)
    configure(project, '[tool.gradguard.per-file-ignores]\n"tests/*" = ["GG1", "GG2"]\n')
    main(["lint", "."])
    assert _reported(capsys) == [("train.py", "GG101"), ("train.py", "GG201")]
    # --per-file-ignores replaces the configured ones; pairs comma-separated, a bare code joins its pattern
    main(["lint", ".", "--per-file-ignores", "train.py:GG101,GG201, tests/unit/*:GG101"])
    assert _reported(capsys) == [("tests/helper.py", "GG101"), ("tests/helper.py", "GG201"),
                                 ("tests/unit/test_loop.py", "GG201")]
    main(["lint", ".", "--extend-per-file-ignores", "train.py:GG201"])
    assert _reported(capsys) == [("train.py", "GG101")]
    for bad in ("GG101", "tests/*:", "tests/*:GG999"):
        assert main(["lint", ".", "--per-file-ignores", bad]) == 2, bad
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("gradguard lint: error: --per-file-ignores: "), err
    configure(project, "per-file-ignores = [\"tests/*\"]\n")
    assert main(["lint", "."]) == 2 and "per-file-ignores: must be a table" in capsys.readouterr().err


def test_per_file_ignores_hold_for_fix_and_stdin(project, capsys, monkeypatch):
    import io
    import sys

    _layout(project)
    configure(project, '[tool.gradguard.per-file-ignores]\n"tests/*" = ["GG101"]\n')
    assert main(["lint", "--fix", "--select", "GG101", "."]) == 0
    assert "zero_grad" in (project / "train.py").read_text()
    assert (project / "tests" / "helper.py").read_text() == BUGGY  # its GG101 is ignored there: not fixed
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BUGGY.encode())))
    assert main(["lint", "-", "--stdin-filename", "tests/x.py"]) == 1
    assert [line.split(": ")[1][:5] for line in capsys.readouterr().out.splitlines() if ": GG" in line] == ["GG201"]


# ------------------------------------------------------------------------------------ output

def test_quiet_prints_the_findings_and_nothing_else(project, capsys):
    Path("t.py").write_text(BUGGY)
    assert main(["lint", "t.py"]) == 1
    loud = capsys.readouterr().out.splitlines()
    assert main(["lint", "-q", "t.py"]) == 1
    quiet = capsys.readouterr().out.splitlines()
    assert quiet == loud[:2] and len(loud) > 2 and all(": GG" in line for line in quiet)
    assert main(["lint", "--quiet", "--statistics", "t.py"]) == 1
    assert "Found" not in capsys.readouterr().out
    Path("ok.py").write_text("x = 1\n")
    assert main(["lint", "-q", "ok.py"]) == 0 and capsys.readouterr().out == ""
    assert main(["lint", "-q", "--fix", "--select", "GG101", "t.py"]) == 0
    assert capsys.readouterr().out == "" and "zero_grad" in Path("t.py").read_text()
    assert main(["lint", "-q", "t.py"]) == 1
    assert [line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines()] == [loud[1].split(": ", 1)[1]]


def test_show_fixes(project, capsys):
    Path("t.py").write_text(BUGGY)
    Path("u.py").write_text(BUGGY.replace("    total += loss\n", "    total += loss\n    print(total)\n"))
    assert main(["lint", "--show-fixes", "t.py"]) == 1
    assert "2 fixable with --fix." in capsys.readouterr().out
    assert main(["lint", "--show-fixes", "--select", "GG105", "t.py"]) == 0
    assert "fixable" not in capsys.readouterr().out
    assert main(["lint", "--diff", "--show-fixes", "t.py", "u.py"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "Would fix 4 findings:", "- t.py:", "    1 \u00d7 GG101 (stale-gradient)",
        "    1 \u00d7 GG201 (graph-kept-by-logging)", "- u.py:", "    1 \u00d7 GG101 (stale-gradient)",
        "    1 \u00d7 GG201 (graph-kept-by-logging)"]
    assert main(["lint", "--fix", "--show-fixes", "--select", "GG101", "t.py"]) == 0
    assert capsys.readouterr().out.splitlines()[:3] == ["Fixed 1 finding:", "- t.py:", "    1 \u00d7 GG101 (stale-gradient)"]
    assert main(["lint", "--fix", "--show-fixes", "--select", "GG101", "t.py"]) == 0  # nothing left: the plain line
    assert capsys.readouterr().out.splitlines()[0] == "Fixed 0 findings."
    assert main(["lint", "--fix-only", "--show-fixes", "u.py"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ["Fixed 2 findings:", "- u.py:"]


# ---------------------------------------------------------------------------------- add-noqa

def test_add_noqa_silences_every_finding_and_changes_no_code(project, capsys):
    source = BUGGY.replace(STEP, STEP.rstrip("\n") + "  # noqa: E501\n").replace("    total += loss\n",
                                                                                  "    total += loss  # keep\n")
    Path("t.py").write_text(source)
    assert main(["lint", "t.py"]) == 1 and capsys.readouterr().out.count(": GG") == 2
    assert main(["lint", "--add-noqa", "t.py"]) == 0
    assert capsys.readouterr().err == "Added 2 noqa directives.\n"
    new = Path("t.py").read_text()
    assert "    optimizer.step()  # noqa: E501, GG101\n" in new  # joined the list already there
    assert "    total += loss  # keep  # noqa: GG201\n" in new
    assert ast.dump(ast.parse(new)) == ast.dump(ast.parse(source))
    assert main(["lint", "t.py"]) == 0
    assert main(["lint", "--add-noqa", "t.py"]) == 0 and Path("t.py").read_text() == new  # nothing more to add
    assert "Added 0 noqa directives." in capsys.readouterr().err


def test_add_noqa_where_no_comment_can_go(project, capsys):
    """A line ending inside a string, or continued with a backslash, cannot hold a comment: reported, not written."""
    source = BUGGY.replace(STEP, '    optimizer.step(); note = """a\n    b"""\n').replace(
        "    total += loss\n", "    total += loss + \\\n        0\n")
    Path("t.py").write_text(source)
    assert main(["lint", "--add-noqa", "t.py"]) == 0
    err = capsys.readouterr().err
    assert "t.py:5:5: GG101 not silenced" in err and "t.py:7:5: GG201 not silenced" in err
    assert "Added 0 noqa directives." in err and Path("t.py").read_text() == source


def test_add_noqa_keeps_line_endings_and_a_blanket_noqa(project, capsys):
    source = with_comment("# noqa").replace("\n", "\r\n")
    Path("t.py").write_bytes(source.encode())
    assert main(["lint", "-q", "--add-noqa", "t.py"]) == 0 and capsys.readouterr().err == ""
    new = Path("t.py").read_bytes().decode()
    assert "    optimizer.step()  # noqa  # noqa: GG101\r\n" in new and new.count("\r\n") == source.count("\r\n")
    assert new.count("\n") == new.count("\r\n")


def test_add_noqa_is_refused_with_fix_or_stdin(project, capsys):
    Path("t.py").write_text(BUGGY)
    for extra in (["--fix"], ["--diff"], ["--fix-only"]):
        assert main(["lint", "--add-noqa", *extra, "t.py"]) == 2
    assert main(["lint", "--add-noqa", "-"]) == 2
    assert "--add-noqa edits files" in capsys.readouterr().err
    assert Path("t.py").read_text() == BUGGY


def test_add_noqa_leaves_a_read_only_file(project, capsys):
    Path("t.py").write_text(BUGGY)
    os.chmod("t.py", 0o444)
    try:
        assert main(["lint", "--add-noqa", "t.py"]) == 1
        assert "read-only file" in capsys.readouterr().err and Path("t.py").read_text() == BUGGY
    finally:
        os.chmod("t.py", 0o644)
