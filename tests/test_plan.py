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


@pytest.mark.slow
def test_demo_factory_prints_the_largest_fitting_size_and_writes_a_plot(tmp_path, capsys):
    png = tmp_path / "plan.png"
    code = main(["plan", "gradguard.demo.model:plan_factory", "--batch-size", "32", "--budget", "2MiB",
                 "--plot", str(png), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "largest micro-batch size within 2.00 MiB: 16 -> 2 accumulation steps" in out
    assert "micro-batch" in out and "activations" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
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


FACTORY_FILE = """\
import torch
from plan_helper import WIDTH

def make(batch_size):
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return model, lambda m, b: m(b).pow(2).mean(), torch.randn(batch_size, WIDTH)
"""


def test_factory_from_the_current_folder_and_from_a_file(tmp_path, monkeypatch, capsys):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "myfactory.py").write_text(FACTORY_FILE)
    (tmp_path / "proj" / "plan_helper.py").write_text("WIDTH = 6\n")
    args = ["--batch-size", "4", "--budget", "1GiB", "--plot", "", "--no-progress"]
    monkeypatch.chdir(tmp_path / "proj")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path / "proj"))])
    assert main(["plan", "myfactory:make", *args]) == 0  # module:function in the current folder, as uvicorn finds it
    monkeypatch.chdir(tmp_path)
    for name in ("myfactory", "plan_helper"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert main(["plan", "proj/myfactory.py:make", *args]) == 0  # a file path; its folder serves its imports
    assert "largest micro-batch size within 1.00 GiB: 4" in capsys.readouterr().out
    assert main(["plan", "proj/nothere.py:make", *args]) == 2
    assert "no such file" in capsys.readouterr().err


def test_required_within_rounding_of_the_budget_shows_enough_digits(factories, capsys):
    import re

    import gradguard as gg
    from gradguard.memory import format_bytes

    model, loss_fn, batch = factories.sized(batch_size=4)
    report = gg.measure_memory(model, loss_fn, batch, [4])
    required = report.required(report.rows[0])
    budget = required - 1  # one byte short: does not fit, and must not read as if it did
    assert format_bytes(required) == format_bytes(budget)  # the default rounding hides it
    code = main(["plan", "gg_plan_factories:sized", "--batch-size", "4", "--sizes", "4", "--budget", str(budget),
                 "--plot", "", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1
    row = next(line for line in out.splitlines() if line.split()[:1] == ["4"])
    assert row.split()[-1] == "no"
    shown_required = " ".join(row.split()[-3:-1])
    shown_budget = re.search(r"nothing fits (\S+ \S+):", out).group(1)
    assert shown_required != shown_budget
    assert f"needs {shown_required}" in out


def test_plot_path_checked_before_measuring(tmp_path, capsys):
    for bad in (tmp_path / "no" / "dir" / "p.png", tmp_path):
        code = main(["plan", "gradguard.demo.model:plan_factory", "--batch-size", "4", "--budget", "1GiB",
                     "--plot", str(bad), "--no-progress"])
        out, err = capsys.readouterr()
        assert code == 2 and out == ""  # no table: nothing was measured
        assert err.startswith("gradguard plan: error: --plot ") and err.count("\n") == 1
