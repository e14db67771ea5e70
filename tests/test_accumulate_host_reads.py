"""Host reads (device -> Python values) per accumulation window, counted with a dispatch mode on CPU.

On a GPU each read stalls the CPU until the device catches up. The default Accumulator
must add none per micro-batch: at most one per window. Losses in host memory are read
one by one at the window's end (no transfer, no sync there); the path an accelerator
takes, one transfer per window, is forced here with ``accelerator_path``.
"""

import math

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import gradguard as gg


class HostReads(TorchDispatchMode):
    """Counts ``aten._local_scalar_dense`` (``.item()``, ``bool()``, ``float()``) and copies to the CPU."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        elif func is torch.ops.aten._to_copy.default and kwargs.get("device") is not None and torch.device(kwargs["device"]).type == "cpu":
            self.count += 1
        return func(*args, **kwargs)


@pytest.fixture
def accelerator_path(monkeypatch):
    """Read the window's losses as on an accelerator (one stacked transfer), though they are in host memory."""
    import gradguard.accumulate

    monkeypatch.setattr(gradguard.accumulate, "_in_host_memory", lambda tensors: False)


def _reads_per_window(steps, windows=3, scaler=False, count="int", reduction="mean", **kwargs):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # SGD reads nothing itself
    acc = gg.Accumulator(opt, steps=steps, max_grad_norm=1.0,
                         scaler=torch.amp.GradScaler("cpu") if scaler else None, **kwargs)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 6, generator=g), torch.randn(4, 1, generator=g)) for _ in range(steps * (windows + 1))]

    def micro(x, y):
        loss = nn.functional.mse_loss(model(x), y) * (len(x) if reduction == "sum" else 1)
        n = {"int": len(x), "none": None, "tensor": torch.tensor(len(x))}[count]
        acc.backward(loss, count=n, reduction=reduction)
        return acc.step()

    for x, y in data[:steps]:  # warm-up window
        micro(x, y)
    with HostReads() as reads:
        stepped = [micro(x, y) for x, y in data[steps:]]
    assert sum(stepped) == windows
    base = 0
    if scaler:  # what the GradScaler reads itself, in a hand-written loop
        sc = torch.amp.GradScaler("cpu")
        with HostReads() as own:
            for x, y in data[:steps]:
                sc.scale(nn.functional.mse_loss(model(x), y) / steps).backward()
            sc.unscale_(opt)
            sc.step(opt)
            sc.update()
            opt.zero_grad()
        base = own.count
    return reads.count / windows - base


@pytest.mark.parametrize("steps", [4, 8])
@pytest.mark.parametrize("kwargs", [{}, {"count": "none"}, {"nonfinite": "skip"}, {"scaler": True},
                                    {"count": "tensor", "reduction": "sum"}], ids=str)
def test_default_loops_read_once_per_window_whatever_the_number_of_micro_batches(steps, kwargs, accelerator_path):
    assert _reads_per_window(steps, **kwargs) == 1


@pytest.mark.parametrize("steps", [4, 8])
def test_losses_in_host_memory_are_read_each_at_the_window_end(steps):
    # One item() per loss (no transfer: they are in host memory), and none before the window's end.
    assert _reads_per_window(steps) == steps
    model = nn.Linear(6, 1)
    acc = gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.01), steps=steps)
    with HostReads() as reads:
        for _ in range(steps - 1):
            acc.backward(model(torch.randn(4, 6)).pow(2).mean(), count=4)
            acc.step()
    assert reads.count == 0
    with HostReads() as reads:
        acc.backward(model(torch.randn(4, 6)).pow(2).mean(), count=4)
        assert acc.step()
    assert reads.count == steps


@pytest.mark.parametrize("steps", [4, 8])
def test_the_per_micro_batch_reads_that_remain_are_the_documented_ones(steps, accelerator_path):
    # Negative controls: the counter sees per-micro-batch reads where they exist.
    assert _reads_per_window(steps, nonfinite="raise_early") == steps + 1
    assert _reads_per_window(steps, count="tensor") == steps + 1  # a mean's 0/0 must be seen before backward


def test_a_tensor_count_of_a_summed_loss_is_still_validated_at_the_window_end():
    model = nn.Linear(3, 1).double()
    before = [p.detach().clone() for p in model.parameters()]
    acc = gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.1), steps=2)
    x = torch.randn(4, 3, dtype=torch.float64)
    acc.backward(model(x).pow(2).sum(), count=torch.tensor(4), reduction="sum")
    acc.step()
    acc.backward(model(x).pow(2).sum(), count=torch.tensor(-3.0), reduction="sum")
    with pytest.raises(gg.GradguardError, match=r"got -3.0 at micro-batch 1 of window 0.*nothing was applied"):
        acc.step()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert all(p.grad is None for p in model.parameters())


def test_a_weighted_sum_that_overflows_is_not_mistaken_for_a_nonfinite_loss():
    """Losses of 1e300 weighted by 1e10 items: the (float64) loss sum is inf, every loss finite, the gradient fine."""
    model = nn.Linear(2, 1).double()
    acc = gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.0), steps=2)
    x = torch.ones(1, 2, dtype=torch.float64)
    for _ in range(2):
        acc.backward(model(x).sum() * 0 + 1e300 + model(x).sum() * 1e-300, count=10**10)
        stepped = acc.step()
    assert stepped and math.isinf(acc.loss)
