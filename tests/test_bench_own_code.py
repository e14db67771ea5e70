"""benchmarks/bench_accumulate.py's own-code table: the shared torch work is subtracted, what a method adds is not.

The table is how the Accumulator's cost on a transformer is resolved below the noise
of whole-step timings, so the subtraction itself is checked here: a loop that adds
known work must show it (negative control), two identical loops must not differ by
more than a fraction of it, and every wrapped call must be put back afterwards.
"""

import pytest
import torch

from _benchmarks import busy as _busy
from _benchmarks import load

# Wall-clock timings: out of the default run and CI (tests/conftest.py); `pytest --run-bench` runs them.
pytestmark = pytest.mark.bench

EXTRA = 0.005  # seconds of busy work per window: far above what these tiny steps take otherwise


def _load():
    return load("bench_accumulate")


def test_own_code_time_shows_added_work_and_only_it():
    bench = _load()

    class Slower(bench.HandWritten):
        """The hand-written loop plus work of its own, outside every torch call."""

        def window(self, mbs):
            super().window(mbs)
            _busy(EXTRA)

    class SlowerForward(bench.HandWritten):
        """The hand-written loop whose forward takes longer: shared work, subtracted."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            inner = self.loss
            self.loss = lambda *a: (_busy(EXTRA / 4), inner(*a))[1]

    torch.manual_seed(0)
    windows = bench.make_mlp_windows(2, 4, variable=True)
    runners = {}
    for name, cls in (("hand-written", bench.HandWritten), ("hand-written (A/A)", bench.HandWritten),
                      ("gradguard", bench.WithGradguard), ("slower", Slower), ("slower forward", SlowerForward)):
        model = bench.TinyMLP()
        runners[name] = cls(model, torch.optim.AdamW(model.parameters(), lr=1e-4), 4, True, bench.mse_loss_of)
    opt = runners["gradguard"].acc.optimizer
    engine = torch.autograd.backward

    own = bench.own_code_time(runners, windows, rounds=6, repeat=1)

    base = own["hand-written"]
    assert own["slower"] - base >= 0.9 * EXTRA, own  # the added work shows
    # Identical loops, and a loop whose extra time is all in its forward pass, come out alike.
    assert abs(own["hand-written (A/A)"] - base) < EXTRA / 2, own
    assert abs(own["slower forward"] - base) < EXTRA / 2, own
    assert 0 < own["gradguard"] < EXTRA, own
    # Every wrapped call is as before.
    assert torch.autograd.backward is engine
    assert "step" not in vars(opt) and "zero_grad" not in vars(opt)
    assert runners["gradguard"].loss is bench.mse_loss_of
    runners["gradguard"].window(windows[0])  # and the runners still train
    assert runners["gradguard"].acc.optimizer_steps == 7


def test_compare_loads_both_versions_alike_and_reports_their_paired_difference(tmp_path, capsys):
    # Under --compare neither Accumulator is the installed package: both are copies under other
    # names, loaded the same way, so neither is favoured by how it was imported.
    import gradguard
    from pathlib import Path

    bench = _load()
    src = Path(gradguard.__file__).resolve().parents[1]
    assert bench.main(["--only", "mlp", "--quick", "--no-accelerate", "--compare", str(src), "--out", str(tmp_path)]) == 0
    assert bench.WithGradguard.package.__name__ == "gradguard_current"
    assert bench.WithGradguardBefore.package.__name__ == "gradguard_before"
    assert bench.WithGradguard.package is not gradguard
    out = capsys.readouterr().out
    assert out.count("gradguard - gradguard before, per round:") == 2  # one per tiny-MLP workload
