"""How the Accumulator runs a weighted backward pass: straight into autograd's engine while
``torch.autograd.backward`` is torch's own, through it while anything (a running watch, a profiler)
wraps it. Either way the gradient is the one ``(loss * weight).backward()`` gives, bit for bit.
(That a running watch still sees the Accumulator's passes: tests/test_watch_gg102_accumulator.py.)"""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import gradguard as gg
import gradguard.distributed as dist_mod


def _pair(dtype=torch.float64):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1)).to(dtype)
    twin = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1)).to(dtype)
    twin.load_state_dict(model.state_dict())
    return model, twin


def _engine_calls(monkeypatch) -> list:
    calls = []
    engine = dist_mod._run_backward

    def counting(*args, **kwargs):
        calls.append(1)
        return engine(*args, **kwargs)

    monkeypatch.setattr(dist_mod, "_run_backward", counting)
    return calls


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_direct_engine_pass_equals_the_multiplied_loss_bit_for_bit(monkeypatch, dtype):
    calls = _engine_calls(monkeypatch)
    model, twin = _pair(dtype)
    acc = gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.1), steps=4)
    x, y = torch.randn(6, 4).to(dtype), torch.randn(6, 1).to(dtype)
    for a, b in ((0, 2), (2, 6)):  # weights 2/(2*4) and 4/(2*4)
        acc.backward(F.mse_loss(model(x[a:b]), y[a:b]), count=b - a)
        acc.step()
        (F.mse_loss(twin(x[a:b]), y[a:b]) * ((b - a) / 8)).backward()
    assert len(calls) == 2  # the engine path was taken (the test would pass vacuously otherwise)
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p.grad, q.grad)
    # Negative control: the same passes without the weights give another gradient.
    twin.zero_grad()
    for a, b in ((0, 2), (2, 6)):
        F.mse_loss(twin(x[a:b]), y[a:b]).backward()
    assert not all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), twin.parameters()))


def test_a_wrapper_around_torch_autograd_backward_sees_every_pass(monkeypatch):
    calls = _engine_calls(monkeypatch)
    seen = []
    original = torch.autograd.backward

    def wrapper(tensors, grad_tensors=None, *args, **kwargs):
        seen.append(None if grad_tensors is None else float(grad_tensors))
        return original(tensors, grad_tensors, *args, **kwargs)

    monkeypatch.setattr(torch.autograd, "backward", wrapper)
    model, twin = _pair()
    acc = gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.1), steps=2)
    x, y = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 1, dtype=torch.float64)
    acc.backward(F.mse_loss(model(x), y), count=3)
    assert seen == [0.5] and calls == []  # through the wrapper, with its weight, not around it
    (F.mse_loss(twin(x), y) * 0.5).backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p.grad, q.grad)

