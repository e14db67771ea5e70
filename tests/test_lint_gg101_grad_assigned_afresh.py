"""GG101: every parameter's ``.grad`` assigned afresh just before the step is a clearing and a fill.

``for i, p in enumerate(model.parameters()): p.grad = grads[i].data`` (a meta-learning update that
back-propagates a proxy loss into another network, then hands the model the gradient it computed with
``torch.autograd.grad``): the assignment replaces whatever earlier passes left, so the step applies this
iteration's gradient only. The programs run in float64 against plain SGD that applies ``grads`` itself (the
truth): the fill form matches it and the linter is silent. Negative controls, which drift from the truth and
are reported: the fill reading the old ``.grad`` (``p.grad = p.grad + g``), a fill of one parameter only, and
a fill of another model's parameters than the stepped optimizer's.
"""

from __future__ import annotations

import re
import textwrap

import torch

from _findings import codes

GOOD = """\
import torch


def train(model, loader, lr):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        grads = torch.autograd.grad(loss, list(model.parameters()))
        proxy = model(x).sum()
        proxy.backward()
        for i, param in enumerate(model.parameters()):
            param.grad = grads[i].data
        optimizer.step()
"""
ADDS = GOOD.replace("param.grad = grads[i].data", "param.grad = param.grad + grads[i].data")
ONE = GOOD.replace("            param.grad = grads[i].data", "            if i == 0:\n                param.grad = grads[i].data")
# the optimizer built where the file does not show (a base class): the fill covers the model no other
# optimizer of the file holds
METHOD = """\
import torch


class Base:
    pass


class Learner(Base):
    def __init__(self, model, head, lr):
        self.model, self.head = model, head
        self.opt_head = torch.optim.SGD(self.head.parameters(), lr=lr)

    def train(self, loader):
        for x, y in loader:
            loss = ((self.model(x) - y) ** 2).mean()
            grads = torch.autograd.grad(loss, list(self.model.parameters()))
            self.opt_head.zero_grad()
            proxy = (self.head(x) - y).pow(2).mean()
            proxy.backward()
            self.opt_head.step()
            for p, g in zip(self.model.parameters(), grads):
                p.grad = g.detach()
            self.optimizer.step()


def train(model, loader, lr):
    learner = Learner(model, torch.nn.Linear(3, 1).double(), lr)
    setattr(learner, "optimizer", torch.optim.SGD(model.parameters(), lr=lr))  # as a base class of another file
    learner.train(loader)
"""
OTHER = METHOD.replace("zip(self.model.parameters(), grads)", "zip(self.head.parameters(), grads)")


def _gg101(source):
    return [c for c in codes(source) if c == "GG101"]


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
            for _ in range(4)]


def _run(source):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    namespace["train"](model, _data(), 0.1)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _reference():
    """Plain SGD applying each iteration's gradient of the mean squared error, by hand, in float64."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    for x, y in _data():
        grads = torch.autograd.grad(((model(x) - y) ** 2).mean(), list(model.parameters()))
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads):
                p -= 0.1 * g
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_every_grad_assigned_afresh_is_a_clearing_and_not_reported():
    for source in (GOOD, METHOD):
        assert torch.allclose(_run(source), _reference())
        assert _gg101(source) == []


def test_negative_controls_a_fill_that_keeps_old_gradients_is_reported():
    for source in (ADDS, ONE, OTHER):
        assert not torch.allclose(_run(source), _reference())
        assert "GG101" in _gg101(source)


def _renamed(source):
    for old, new in (("param", "w"), ("grads", "gs"), ("optimizer", "upd_opt"), ("proxy", "aux"), ("model", "net")):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def test_renamed_keeps_the_verdict():
    for source in (GOOD, ADDS, ONE):
        renamed = _renamed(source)
        assert renamed != source
        assert torch.allclose(_run(renamed), _run(source))
        assert _gg101(renamed) == _gg101(source)
    assert _gg101(_renamed(GOOD)) == []
