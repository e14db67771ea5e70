"""Which passes' gradients a step applies: findings decided from the program, in several forms.

Each class comes from a false finding or a miss on real or published code (all of them read while
fixing, so in-sample): a warm-up pass on a tensor no optimizer holds (GG114), a step applying a
gradient an earlier step of the same optimizer already applied (GG101), a loss returned by a
helper and summed (GG201), a loss rebuilt every iteration and not a running total (GG201). Every
bad program is checked by running it where the claim is numeric; every good twin must stay silent.
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg


def _codes(source, code):
    return [f.line for f in gg.lint_source(source) if f.code == code]


GG114_GOOD = '''\
import torch
import torch.nn as nn


def warm_up_inline(model, loader, opt):
    torch.empty(1, requires_grad=True).backward()  # autograd warm-up
    for x in loader:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()


def warm_up_named(net, batches, o):
    probe = torch.zeros(3, requires_grad=True)
    doubled = probe * 2
    doubled.sum().backward()
    for b in batches:
        net(b).mean().backward()
        o.step()
        o.zero_grad(set_to_none=True)


def _prime():
    nn.functional.relu(torch.ones(2, requires_grad=True)).sum().backward()


class Runner:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def fit(self, loader):
        _prime()
        for x in loader:
            self.model(x).sum().backward()
            self.opt.step()
            self.opt.zero_grad()
'''

GG114_BAD = '''\
import torch


def leaf_then_given_to_optimizer(model, loader):
    scale = torch.ones(1, requires_grad=True)
    scale.sum().backward()
    opt = torch.optim.SGD([scale] + list(model.parameters()), lr=0.1)
    for x in loader:
        (model(x) * scale).sum().backward()
        opt.step()
        opt.zero_grad()


def warm_up_on_the_model(model, loader, opt):
    model(torch.zeros(1, 4)).sum().backward()
    for x in loader:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()


def _prime(model):
    model(torch.ones(2, 4)).sum().backward()


class Runner:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def fit(self, loader):
        _prime(self.model)
        for x in loader:
            self.model(x).sum().backward()
            self.opt.step()
            self.opt.zero_grad()
'''


def test_gg114_silent_on_warm_up_passes_of_tensors_no_optimizer_holds():
    assert _codes(GG114_GOOD, "GG114") == []


def test_gg114_still_reports_passes_that_reach_a_stepped_parameter():
    # a fresh leaf later handed to the optimizer, a pass through the model, a helper doing one
    assert _codes(GG114_BAD, "GG114") == [6, 15, 31]


def test_gg114_warm_up_leaf_really_leaves_the_step_unchanged():
    """The claim the silence rests on, run in float64: a fresh leaf's pass changes no parameter's .grad."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    x = torch.randn(4, 3, dtype=torch.float64)
    torch.empty(1, dtype=torch.float64, requires_grad=True).backward()
    model(x).sum().backward()
    with_warm_up = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(with_warm_up, model.parameters()))
    # negative control: a pass through the model does change what the step applies
    model(torch.ones(1, 3, dtype=torch.float64)).sum().backward()
    assert not all(torch.equal(a, p.grad) for a, p in zip(with_warm_up, model.parameters()))
