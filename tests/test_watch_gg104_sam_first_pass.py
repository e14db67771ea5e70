"""GG104 at run time on a SAM step whose first backward pass is left in .grad: the pass at the perturbed weights
is added to it, and the base step applies the sum of gradients taken at two different weights.

Each loop is run in float64 with plain SGD and its first update compared with the references computed by hand:
the SAM update (the gradient at the perturbed weights only) and the sum of the two gradients. The watch must
report GG104 at the first step exactly where the update is the sum; the same bug written through a SAM optimizer
class (renamed, the clearing an argument) reads the same, and the controls stay silent: SAM that clears (both
forms), two different losses back-propagated at the same weights and summed on purpose, and a perturbation whose
pass is cleared before the second backward.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradguard as gg

RHO, LR = 0.05, 0.1


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).double()


def _batch(i):
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(8, 4, generator=g, dtype=torch.float64), torch.randn(8, 1, generator=g, dtype=torch.float64)


def _loop(clear_between: bool, perturb: bool = True, steps: int = 3):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    start = [p.detach().clone() for p in m.parameters()]
    with gg.watch(mode="record") as w:
        for i in range(steps):
            x, y = _batch(i)
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            with torch.no_grad():
                norm = torch.norm(torch.stack([p.grad.norm() for p in m.parameters()]))
                eps = [RHO * p.grad / (norm + 1e-12) for p in m.parameters()] if perturb else []
                for p, e in zip(m.parameters(), eps):
                    p.add_(e)
            if clear_between:
                opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            with torch.no_grad():
                for p, e in zip(m.parameters(), eps):
                    p.sub_(e)
            opt.step()
            if i == 0:
                first = [p.detach().clone() - s for p, s in zip(m.parameters(), start)]
    return w, first


def _references():
    """The first update of SAM (gradient at the perturbed weights) and of the sum of the two gradients."""
    m = _model()
    x, y = _batch(0)
    params = list(m.parameters())
    g1 = torch.autograd.grad(F.mse_loss(m(x), y), params)
    norm = torch.norm(torch.stack([g.norm() for g in g1]))
    with torch.no_grad():
        for p, g in zip(params, g1):
            p.add_(RHO * g / (norm + 1e-12))
    g2 = torch.autograd.grad(F.mse_loss(m(x), y), params)
    return [-LR * b for b in g2], [-LR * (a + b) for a, b in zip(g1, g2)]


def test_the_first_pass_left_in_grad_is_reported_at_the_first_step():
    sam, summed = _references()
    w, first = _loop(clear_between=False)
    assert all(torch.allclose(a, b, rtol=1e-10, atol=1e-12) for a, b in zip(first, summed))
    assert not all(torch.allclose(a, b, rtol=1e-6, atol=1e-9) for a, b in zip(first, sam))
    found = [f for f in w.findings if f.code == "GG104"]
    assert [f.code for f in w.findings] == ["GG104"] and found[0].step == 1


def test_sam_that_clears_the_first_pass_is_silent():
    sam, _ = _references()
    w, first = _loop(clear_between=True)
    assert all(torch.allclose(a, b, rtol=1e-10, atol=1e-12) for a, b in zip(first, sam))
    assert [f.code for f in w.findings] == []


def test_two_losses_at_the_same_weights_are_silent():
    # no perturbation: two backward lines summed into one step at one point (a multi-term loss, a GAN's real
    # and fake terms): a sum made on purpose
    w, _ = _loop(clear_between=False, perturb=False)
    assert [f.code for f in w.findings] == []


class Sharpness(torch.optim.Optimizer):
    """A SAM optimizer whose first step clears the gradient only when asked to."""

    def __init__(self, params, base, radius=RHO, **kwargs):
        super().__init__(params, dict(radius=radius, **kwargs))
        self.base = base(self.param_groups, **kwargs)
        self.param_groups = self.base.param_groups

    @torch.no_grad()
    def ascend(self, clear):
        norm = torch.norm(torch.stack([p.grad.norm() for g in self.param_groups for p in g["params"] if p.grad is not None]))
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.state[p]["origin"] = p.data.clone()
                    p.add_(p.grad * (group["radius"] / (norm + 1e-12)))
        if clear:
            self.zero_grad()

    @torch.no_grad()
    def descend(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data = self.state[p]["origin"]
        self.base.step()
        self.zero_grad()


@pytest.mark.parametrize("clear,expected", [(False, ["GG101", "GG104"]), (True, [])], ids=["not-cleared", "cleared"])
def test_a_sam_optimizer_class_reads_the_same(clear, expected):
    # (here the first pass's parameters are moved by the optimizer's own method, which the watch also reads as
    # an update by hand on a gradient not cleared: GG101 too)
    net = _model()
    opt = Sharpness(net.parameters(), torch.optim.SGD, lr=LR)
    with gg.watch(mode="record") as w:
        for i in range(3):
            inputs, targets = _batch(i)
            F.mse_loss(net(inputs), targets).backward()
            opt.ascend(clear)
            F.mse_loss(net(inputs), targets).backward()
            opt.descend()
    assert sorted({f.code for f in w.findings}) == expected
