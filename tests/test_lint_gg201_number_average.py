"""GG201's moving-average reading (``avg = a * avg + b * x``) holds only where the new term may carry a graph.

``A = float(td) + gamma * lam * A`` (a GAE advantage built from Python numbers) links no autograd graph: it
must stay silent, under any names. ``ema = 0.9 * ema + 0.1 * loss`` with the loss tensor links every
iteration's graph to the next: still reported. The programs are run, and what the name holds at the end (a
number, or a tensor whose graph reaches every iteration's) is the oracle the verdict is checked against.
"""

from __future__ import annotations

import pytest
import torch

from gradguard.lint import lint_source

NUMBER = '''
import torch

def train(model, opt, batches, {cfg}):
    {adv} = torch.zeros(1, 1)
    for x, y in batches:
        for i in reversed(range(len(x))):
            {td} = y[i, 0] - model(x[i:i + 1]).detach()[0, 0]
            {adv} = float({td}) + {cfg}.gamma * {cfg}.lam * {adv}
        {small} = - {cfg}.coeff * model(x).mean()
        {err} = {small} + ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        {err}.backward()
        opt.step()
    return {adv}
'''

TENSOR = '''
import torch

def train(model, opt, batches, {cfg}):
    {adv} = 0.0
    for x, y in batches:
        opt.zero_grad()
        {err} = ((model(x) - y) ** 2).mean()
        {err}.backward()
        opt.step()
        {adv} = {cfg}.lam * {err} + (1 - {cfg}.lam) * {adv}
    return {adv}
'''

NAMES = [dict(adv="A", err="total_loss", td="td", cfg="params", small="loss_ent"),
         dict(adv="running", err="e", td="delta", cfg="hp", small="b")]


def _run(source: str):
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)) for _ in range(5)]
    from types import SimpleNamespace

    return scope["train"](model, opt, batches, SimpleNamespace(gamma=0.99, lam=0.95, coeff=1e-3))


def _codes(source: str):
    return [f.code for f in lint_source(source, "train.py")]


@pytest.mark.parametrize("names", NAMES)
def test_a_moving_average_of_python_numbers_is_not_reported(names):
    source = NUMBER.format(**names)
    held = _run(source)
    assert held.grad_fn is None and not held.requires_grad  # the oracle: no graph is ever linked into it
    assert "GG201" not in _codes(source)


@pytest.mark.parametrize("names", NAMES)
def test_negative_control_a_moving_average_of_the_loss_tensor_is_reported(names):
    source = TENSOR.format(**names)
    held = _run(source)
    assert isinstance(held, torch.Tensor) and held.grad_fn is not None  # the oracle: a graph is kept
    assert "GG201" in _codes(source)
