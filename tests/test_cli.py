"""The command line's shape: main(argv) -> int, python -m gradguard, usage errors exit 2."""

import subprocess
import sys

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


def test_import_gradguard_does_not_import_torch():
    """The linter's command line must start fast: the package loads torch only when asked."""
    code = "import sys, gradguard; assert 'torch' not in sys.modules; gradguard.RULES['GG101']; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_rules_carry_spec_fields_and_the_explanation_rule_prints(capsys):
    import gradguard as gg

    for code, rule in gg.RULES.items():
        assert rule.code == code and rule.name and rule.severity in ("error", "warning", "info") and rule.summary
        assert "## Why is this bad?" in rule.explanation
    assert main(["rule", "GG101"]) == 0
    assert gg.RULES["GG101"].why.splitlines()[0] in capsys.readouterr().out
