"""GG101: a learning-rate scheduler kept in a dict beside the optimizer moves no weight.

``optim = {"main": opt, "lr": StepLR(opt, ...)}`` ... ``optim["lr"].step()`` once per epoch: the entry is
bound to a constructor of ``torch.optim.lr_scheduler`` (resolved by the file's imports), so its step changes
the learning rate and applies no gradient, whatever the key says. Where the file does not show the
constructor (the dict is built in another module), the key the entry is written with is read as its name
(the last resort that already reads ``sched``/``scaler`` in a name, listed in docs/rules.md). The programs
run in float64 against plain SGD with the same schedule (the truth). Negative control: a second optimizer
kept in the dict and stepped per epoch, never cleared, applies the whole epoch's gradients again: it is
reported and drifts from the truth.
"""

from __future__ import annotations

import re
import textwrap

import torch

from _findings import codes

DICT = """\
import torch
from torch.optim.lr_scheduler import StepLR


def train(model, loader, epochs):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    optim = {"main": opt, "lr": StepLR(opt, step_size=1, gamma=0.5)}
    for epoch in range(epochs):
        for x, y in loader:
            optim["main"].zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optim["main"].step()
        optim["lr"].step()
"""
SECOND_OPTIMIZER = DICT.replace('"lr": StepLR(opt, step_size=1, gamma=0.5)', '"lr": torch.optim.SGD(model.parameters(), lr=0.05)')
# built in another module: only the key is in view
KEY = """\
import torch


class Trainer:
    def __init__(self, setting):
        self.setting = setting

    def fit(self, model, loader, epochs):
        for epoch in range(epochs):
            for x, y in loader:
                self.setting.optim["optimizer"].zero_grad()
                loss = ((model(x) - y) ** 2).mean()
                loss.backward()
                self.setting.optim["optimizer"].step()
            self.setting.optim["scheduler"].step()


def train(model, loader, epochs):
    class Setting:
        pass
    setting = Setting()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    setting.optim = {"optimizer": opt, "scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)}
    Trainer(setting).fit(model, loader, epochs)
"""


def _gg101(source):
    return [c for c in codes(source) if c == "GG101"]


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
            for _ in range(3)]


def _run(source):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    namespace["train"](model, _data(), 3)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _reference():
    """Plain SGD by hand, the learning rate halved after each epoch, in float64."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    lr = 0.1
    for _ in range(3):
        for x, y in _data():
            grads = torch.autograd.grad(((model(x) - y) ** 2).mean(), list(model.parameters()))
            with torch.no_grad():
                for p, g in zip(model.parameters(), grads):
                    p -= lr * g
        lr *= 0.5
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_a_scheduler_kept_in_a_dict_is_no_stale_step():
    for source in (DICT, KEY):
        assert torch.allclose(_run(source), _reference())
        assert _gg101(source) == []


def test_negative_control_a_second_optimizer_in_the_dict_is_reported():
    assert not torch.allclose(_run(SECOND_OPTIMIZER), _reference())
    assert "GG101" in _gg101(SECOND_OPTIMIZER)


def _renamed(source):
    source = source.replace("optim[", "optimizers[").replace("optim = {", "optimizers = {")
    for old, new in (("main", "sgd"), ("lr", "aux"), ("model", "net"), ("loss", "obj"), ("epoch", "ep")):
        source = re.sub(rf"\b{old}\b(?!=)", new, source)
    return source


def test_renamed_keeps_the_verdict():
    for source, found in ((DICT, []), (SECOND_OPTIMIZER, ["GG101"])):
        renamed = _renamed(source)
        assert renamed != source
        assert torch.allclose(_run(renamed), _run(source))
        assert _gg101(renamed) == found
