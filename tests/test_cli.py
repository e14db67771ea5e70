"""The command line's shape: main(argv) -> int, python -m gradguard, usage errors exit 2."""

import subprocess
import sys

import pytest

from gradguard.cli import main


def test_help_lists_every_subcommand(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("demo", "run", "lint", "rule", "plan"):
        assert name in out


def test_no_command_and_unknown_command_are_usage_errors(capsys):
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_python_dash_m_and_version():
    done = subprocess.run([sys.executable, "-m", "gradguard", "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("gradguard ")


def test_rules_carry_spec_fields_and_the_explanation_rule_prints(capsys):
    import gradguard as gg

    for code, rule in gg.RULES.items():
        assert rule.code == code and rule.name and rule.severity in ("error", "warning", "info") and rule.summary
        assert "## Why is this bad?" in rule.explanation
    assert main(["rule", "GG101"]) == 0
    assert gg.RULES["GG101"].why.splitlines()[0] in capsys.readouterr().out


@pytest.mark.slow  # runs python in a subprocess
def test_error_types_show_their_public_name():
    import gradguard as gg

    for t in (gg.GradguardError, gg.GradientBugError, gg.GradientBugWarning):
        assert f"{t.__module__}.{t.__qualname__}" == f"gradguard.{t.__name__}"
    code = ("import torch, gradguard as gg\nm = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            "with gg.watch(mode='raise'):\n    for _ in range(2):\n        m(torch.ones(1, 2)).sum().backward()\n"
            "        o.step()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith("gradguard.GradientBugError: <string>:7: GG101 ")


def test_progress_bars_only_on_a_terminal(monkeypatch):
    import io

    from gradguard import _progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(_progress, "_EVERY_S", 0.0)
    monkeypatch.setattr(_progress, "_DELAY_S", 0.0)
    log = io.StringIO()
    assert list(_progress.progress(range(3), desc="work", stream=log)) == [0, 1, 2]
    assert "\r" not in log.getvalue() and log.getvalue().splitlines()[-1].startswith("work: 3/3 done")
    term = Terminal()
    assert list(_progress.progress(range(3), desc="work", stream=term)) == [0, 1, 2]
    assert "\r" in term.getvalue()  # a bar redrawn in place
    for stream in (io.StringIO(), Terminal()):
        assert list(_progress.progress(range(3), desc="work", stream=stream, disable=True)) == [0, 1, 2]
        assert stream.getvalue() == ""
    quiet = io.StringIO()
    monkeypatch.setattr(_progress, "_EVERY_S", 60.0)  # quick work in a log: nothing at all
    assert list(_progress.progress(range(3), desc="work", stream=quiet)) == [0, 1, 2]
    assert quiet.getvalue() == ""


def test_long_running_commands_take_no_progress(capsys):
    for command in ("run", "plan", "lint"):
        assert main([command, "--help"]) == 0
        assert "--no-progress" in capsys.readouterr().out
