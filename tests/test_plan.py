"""`gradguard plan`: factories, the table, the answer, the plot, the exit codes."""

import sys
import types

import pytest
import torch

from gradguard.cli import main


@pytest.fixture
def factories(monkeypatch):
    mod = types.ModuleType("gg_plan_factories")

    class WithExample(torch.nn.Sequential):
        def __init__(self):
            super().__init__(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
            self.example_input_array = torch.zeros(1, 6)

    mod.bare = lambda: torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    mod.lightning_like = WithExample
    mod.sized = lambda batch_size: (mod.bare(), lambda m, b: m(b).pow(2).mean(), torch.randn(batch_size, 5))
    mod.not_a_model = lambda: 42
    monkeypatch.setitem(sys.modules, "gg_plan_factories", mod)
    return mod


def test_demo_factory_prints_the_largest_fitting_size_and_writes_a_plot(tmp_path, capsys):
    png = tmp_path / "plan.png"
    code = main(["plan", "gradguard.demo.model:plan_factory", "--batch-size", "32", "--budget", "2MiB",
                 "--plot", str(png), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "largest micro-batch size within 2.00 MiB: 16 -> 2 accumulation steps" in out
    assert "micro-batch" in out and "activations" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_issue_example_command_works(tmp_path, capsys):
    code = main(["plan", "gradguard.demo.model:plan_factory", "--batch-size", "32", "--budget", "64MiB",
                 "--plot", str(tmp_path / "p.png"), "--no-progress"])
    assert code == 0
    assert ": 32 -> 1 accumulation step " in capsys.readouterr().out


def test_factory_with_batch_size_and_explicit_sizes(factories, capsys):
    code = main(["plan", "gg_plan_factories:sized", "--batch-size", "12", "--budget", "1GiB", "--sizes", "3,6,12",
                 "--plot", "", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert [line.split()[0] for line in out.splitlines() if line.strip()[:2] in ("3 ", "6 ", "12")] == ["3", "6", "12"]


def test_bare_model_needs_an_input_shape(factories, capsys):
    assert main(["plan", "gg_plan_factories:bare", "--batch-size", "4", "--budget", "1GiB", "--plot", "", "--no-progress"]) == 2
    assert "--input-shape" in capsys.readouterr().err
    assert main(["plan", "gg_plan_factories:bare", "--batch-size", "4", "--budget", "1GiB", "--input-shape", "5",
                 "--plot", "", "--no-progress"]) == 0
    assert main(["plan", "gg_plan_factories:lightning_like", "--batch-size", "4", "--budget", "1GiB",
                 "--plot", "", "--no-progress"]) == 0


def test_nothing_fits_exits_1(factories, capsys):
    code = main(["plan", "gg_plan_factories:sized", "--batch-size", "8", "--budget", "100B", "--plot", "", "--no-progress"])
    assert code == 1
    assert "nothing fits" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["nocolon", "--batch-size", "4", "--budget", "1GiB"], "module:function"),
    (["gg_plan_factories:missing", "--batch-size", "4", "--budget", "1GiB"], "cannot load"),
    (["gg_plan_factories:not_a_model", "--batch-size", "4", "--budget", "1GiB"], "must return"),
    (["gg_plan_factories:sized", "--batch-size", "4", "--budget", "much"], "memory size"),
    (["gg_plan_factories:sized", "--batch-size", "4", "--budget", "1GiB", "--sizes", "2,9"], "--sizes"),
])
def test_usage_errors_exit_2(factories, capsys, argv, message):
    assert main(["plan", *argv, "--plot", "", "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_help_has_an_example(capsys):
    assert main(["plan", "--help"]) == 0
    assert "example: gradguard plan gradguard.demo.model:plan_factory" in capsys.readouterr().out
