"""One optimizer seen through two objects: a clearing through one and the steps through the other meet.

Lightning's manual optimization hands ``training_step`` a ``LightningOptimizer``:
another object that copies the optimizer's ``__dict__`` (the same ``param_groups``
list, the same ``state`` dict) and whose ``step()`` calls the optimizer's. A
``zero_grad()`` through it clears the optimizer's buffers, so a clearing left
outside the accumulation condition (PreDiff #32: ``g_opt.zero_grad()`` after the
``if (batch_idx + 1) % K == 0:`` block) throws away every micro-batch but the
window's last. The watch used to count the two objects as two optimizers: the
wrapper never stepped, so its discards were never confirmed by a step and
nothing was reported.

The reference is plain PyTorch in float64: the full batch's mean-loss gradient
per window. The fixed loop matches it; the buggy one does not (so the numbers,
not only the finding, say which is wrong).
"""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg

K = 2


class Handle(torch.optim.Optimizer):
    """Another object of an optimizer, as Lightning makes one: its class derives from the optimizer's,
    its ``__dict__`` is a copy of the optimizer's, and ``step`` is the optimizer's."""

    def __init__(self, optimizer):
        self.__class__ = type("Handle" + type(optimizer).__name__, (Handle, type(optimizer)), {})
        self.__dict__ = {k: v for k, v in optimizer.__dict__.items() if k != "step"}
        self._inner = optimizer

    def step(self, closure=None):
        return self._inner.step(closure)


def _data(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64))
            for _ in range(n)]


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2)).double()


def _reference():
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    data = _data()
    for i in range(0, len(data), K):
        x = torch.cat([d[0] for d in data[i:i + K]])
        y = torch.cat([d[1] for d in data[i:i + K]])
        F.mse_loss(net(x), y).backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _clear(handle):
    handle.zero_grad()


def _loop(clear_outside: bool, through_helper: bool = False, handle_of=Handle):
    net = _net()
    opt = handle_of(torch.optim.SGD(net.parameters(), lr=0.1))
    clear = _clear if through_helper else (lambda h: h.zero_grad())
    with gg.watch(mode="record") as w:
        for i, (x, y) in enumerate(_data()):
            (F.mse_loss(net(x), y) / K).backward()
            if (i + 1) % K == 0:
                opt.step()
                if not clear_outside:
                    clear(opt)
            if clear_outside:
                clear(opt)
    return w.findings, torch.cat([p.detach().reshape(-1) for p in net.parameters()])


@pytest.mark.parametrize("through_helper", [False, True], ids=["inline", "helper"])
def test_a_clearing_through_another_object_of_the_optimizer_is_a_discard(through_helper):
    ref = _reference()
    findings, theta = _loop(clear_outside=True, through_helper=through_helper)
    assert not torch.allclose(theta, ref, rtol=1e-9, atol=1e-12)  # the bug changes the update
    assert [f.code for f in findings] == ["GG102"]
    assert findings[0].step == 1  # at the first step the bug changes
    assert "SGD.step()" in findings[0].message  # named by the optimizer's class, not the wrapper's


@pytest.mark.parametrize("through_helper", [False, True], ids=["inline", "helper"])
def test_the_clearing_after_the_step_through_the_other_object_is_silent_and_exact(through_helper):
    findings, theta = _loop(clear_outside=False, through_helper=through_helper)
    assert torch.allclose(theta, _reference(), rtol=1e-9, atol=1e-12)
    assert findings == []


def test_an_optimizer_with_its_own_state_is_not_the_same_optimizer():
    # Negative control of the identity: a second optimizer over the same parameters, with its own groups and
    # state, is not merged with the first (a step of each on one gradient is GG101's double application).
    net = _net()
    a = torch.optim.SGD(net.parameters(), lr=0.1)
    b = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = _data(1)[0]
    with gg.watch(mode="record") as w:
        for _ in range(2):
            F.mse_loss(net(x), y).backward()
            a.step()
            b.step()
            a.zero_grad()
    assert "GG101" in {f.code for f in w.findings}


@pytest.mark.slow
@pytest.mark.parametrize("fixed", [False, True], ids=["clear-outside", "clear-inside"])
def test_lightning_manual_optimization_clear_outside_the_window(fixed):
    L = pytest.importorskip("lightning.pytorch")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")

    class Manual(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.net = _net()

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            x, y = batch
            self.manual_backward(F.mse_loss(self.net(x), y) / K)
            if (batch_idx + 1) % K == 0:
                opt.step()
                if fixed:
                    opt.zero_grad()
            if not fixed:
                opt.zero_grad()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    module = Manual()
    with gg.watch(mode="record") as w:
        trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, accelerator="cpu", devices=1)
        trainer.fit(module, torch.utils.data.DataLoader(_data(), batch_size=None))
    theta = torch.cat([p.detach().reshape(-1) for p in module.net.parameters()])
    assert torch.allclose(theta, _reference(), rtol=1e-9, atol=1e-12) == fixed
    assert [f.code for f in w.findings] == ([] if fixed else ["GG102"])
