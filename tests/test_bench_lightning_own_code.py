"""benchmarks/bench_integrations.py --tiny --own-code: the torch work every variant shares is subtracted, a callback's own work is not.

Both readings: the window less the shared work ("own code") and the time in the calls where a callback acts
less the shared work inside them ("direct").

The own-code reading is how ExactAccumulation's cost inside a Lightning fit is resolved below the scatter of
whole windows, so the subtraction is checked on real fits: work a callback adds between the passes shows in
full (the reading's point), work added inside the backward pass (shared) and a second stock fit (A/A) do not,
and every wrapped call is put back afterwards.
"""

import time

import pytest
import torch

from _benchmarks import busy, load

# Wall-clock timings: out of the default run and CI (tests/conftest.py); `pytest --run-bench` runs them.
pytestmark = pytest.mark.bench

EXTRA = 0.002  # CPU seconds of busy work per window (K micro-batches): about a stock window of the tiny fit


def test_own_code_shows_a_callbacks_work_and_not_work_inside_the_backward_pass():
    L = pytest.importorskip("lightning.pytorch")  # here, not at import: the fast loop collects this file

    bench = load("bench_integrations")
    torch.set_num_threads(1)

    class Slow(L.Callback):
        """Work of a callback's own between the passes: once per window, before the optimizer step."""

        def on_before_optimizer_step(self, *args):
            busy(EXTRA, time.thread_time)

    class SlowBackward(L.Callback):
        """The same work inside autograd's backward pass (a hook on the loss): shared, subtracted."""

        def on_before_backward(self, trainer, pl_module, loss):
            loss.register_hook(lambda g: (busy(EXTRA / bench.K, time.thread_time), g)[1])  # K passes a window

    batches = bench.tiny_batches()
    engine = torch.autograd.backward
    own = {"stock": [], "A/A": [], "slow": [], "slow backward": []}
    extra = {"stock": (), "A/A": (), "slow": (Slow(),), "slow backward": (SlowBackward(),)}
    bench.lightning_tiny_fit(batches[:16], "stock", 1, shared=bench.SharedWork())  # warm-up
    for _ in range(4):
        for name in own:
            shared = bench.SharedWork()
            own[name].append(bench.lightning_tiny_fit(batches, "stock", 50, shared=shared, extra=extra[name])[2:])
    for reading in (0, 1):  # own code (the window less the shared work), direct (the calls where a callback acts)
        base = min(x[reading] for x in own["stock"])
        low = {name: min(x[reading] for x in runs) - base for name, runs in own.items()}
        assert low["slow"] >= 0.9 * EXTRA, (reading, own)  # the callback's work shows
        assert abs(low["A/A"]) < EXTRA / 3, (reading, own)  # identical fits agree
        assert abs(low["slow backward"]) < EXTRA / 3, (reading, own)  # work inside the backward pass is shared
    assert torch.autograd.backward is engine  # put back
    from lightning.pytorch.trainer import call

    assert not hasattr(call._call_callback_hooks, "__wrapped__") and call._call_callback_hooks.__name__ == "_call_callback_hooks"


def test_own_code_command_prints_every_variant_with_intervals(capsys):
    pytest.importorskip("lightning")
    bench = load("bench_integrations")
    assert bench.main(["--tiny", "--own-code", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for variant in bench.OWN_VARIANTS:
        assert f"  {variant} " in out, out
    assert "95 % bootstrap interval" in out


def test_own_code_needs_tiny_and_excludes_instructions(capsys):
    bench = load("bench_integrations")
    for argv, says in ((["--own-code"], "--own-code works with --tiny only"),
                       (["--tiny", "--own-code", "--instructions"], "pass one of the two")):
        with pytest.raises(SystemExit) as exc:
            bench.main(argv)
        assert exc.value.code == 2
        assert says in capsys.readouterr().err
