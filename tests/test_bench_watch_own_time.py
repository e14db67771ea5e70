"""benchmarks/bench_watch.py's direct timing of the watch: its own code counted, the torch calls it wraps not.

The many-tensor curve reads the watch's cost per tensor from inside its hooks
(no subtraction of two noisy step times), so that timing is checked here: work
added to a hook must show (negative control), a slower backward pass (torch's
work, which the hook wraps) must not, and the hooks must be put back afterwards.
"""

import time
from functools import partial

import pytest
import torch
from torch import nn

from _benchmarks import busy, load
from gradguard.watcher import _session

# Wall-clock timings: out of the default run and CI (tests/conftest.py); `pytest --run-bench` runs them.
pytestmark = pytest.mark.bench

EXTRA = 0.004  # CPU seconds of busy work per step: far above what these tiny steps take otherwise
_busy = partial(busy, clock=time.process_time)


def _load():
    return load("bench_watch")


def _step_of(params, slow_backward=False):
    opt = torch.optim.SGD(params, lr=1e-3, foreach=True)

    def step(probe=None):
        opt.zero_grad(set_to_none=True)
        loss = torch.stack([(p * p).sum() for p in params]).sum()
        if slow_backward:
            loss.register_hook(lambda g: (_busy(EXTRA), g)[1])  # runs inside the backward pass: torch's time
        loss.backward()
        if probe is not None:
            probe()
        opt.step()

    return step


def test_own_time_counts_the_watch_and_not_torch(monkeypatch):
    bench = _load()
    params = [nn.Parameter(torch.randn(3)) for _ in range(50)]
    hooks = {name: getattr(_session.Session, name) for name in ("backward", "zero_grad", "step_pre", "step_post")}
    base = bench._own_time(_step_of(params), 5)
    slow_torch = bench._own_time(_step_of(params, slow_backward=True), 5)
    assert {name: getattr(_session.Session, name) for name in hooks} == hooks  # put back

    real = _session.Session.step_post
    monkeypatch.setattr(_session.Session, "step_post", lambda self, *a: (_busy(EXTRA), real(self, *a))[1])
    slow_watch = bench._own_time(_step_of(params), 5)

    assert 0 < base < EXTRA / 2
    assert slow_torch < base + EXTRA / 2  # the backward pass's extra time is not the watch's
    assert slow_watch > base + EXTRA * 0.8  # negative control: the watch's extra time is


def test_read_time_is_one_read_of_the_grad_list():
    bench = _load()
    few = [nn.Parameter(torch.randn(3)) for _ in range(10)]
    many = [nn.Parameter(torch.randn(3)) for _ in range(5000)]
    small, large = bench._read_time(_step_of(few), few, 5), bench._read_time(_step_of(many), many, 5)
    assert large > small >= 0  # it reads every parameter's .grad: 500 times the tensors take longer


def test_first_grad_read_benchmark_runs_and_refuses_bad_counts(capsys):
    bench = load("bench_first_grad_read")
    assert bench.main(["--tensors", "50", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "the read" in out and "of the read is work the step does anyway" in out
    with pytest.raises(SystemExit) as stop:
        bench.main(["--tensors", "0"])
    assert stop.value.code == 2
    assert "--tensors 0" in capsys.readouterr().err
