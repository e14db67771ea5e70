"""GG101: a step handed the loss (a differentiable optimizer's ``step(loss)``) reads no ``.grad``.

``higher``'s ``inner_optimizer.step(loss_inner)`` computes the gradient of the loss it is given
with ``torch.autograd.grad``: whatever ``.grad`` holds, stale or not, never reaches it. The program
below is run: the inner update is the same whether ``.grad`` holds garbage during it or not (the
truth), and the linter says nothing. Negative control: the same loop stepping a torch optimizer
after ``loss_inner.backward()`` is still reported; its outer step applies the inner pass's gradient
again (its update differs from the twin that clears before the outer pass).
"""

from __future__ import annotations

import re
import textwrap

import torch

from _findings import codes

GOOD = """\
import contextlib

import torch


class DiffSGD:
    def __init__(self, params, lr):
        self.params, self.lr = list(params), lr

    def step(self, loss):
        grads = torch.autograd.grad(loss, self.params)
        with torch.no_grad():
            for p, g in zip(self.params, grads):
                p -= self.lr * g


@contextlib.contextmanager
def inner_loop(model, optimizer):
    yield model, DiffSGD(model.parameters(), lr=optimizer.param_groups[0]["lr"])


def train(model, data, optimizer):
    for x, y in data:
        optimizer.zero_grad()
        with inner_loop(model, optimizer) as (inner_model, inner_optimizer):
            loss_inner = 0
            for xs, ys in zip(x.split(2), y.split(2)):
                loss_inner += ((inner_model(xs) - ys) ** 2).mean() / 2
            inner_optimizer.step(loss_inner)
            outer = ((model(x) - y) ** 2).mean()
        outer.backward()
        optimizer.step()
"""
# a torch optimizer's step after loss_inner.backward() reads `.grad`, and the outer step then applies the
# inner pass's gradient again: nothing clears it between the two steps
BAD = GOOD.replace("inner_optimizer.step(loss_inner)", "loss_inner.backward()\n            inner_optimizer.step()").replace(
    'DiffSGD(model.parameters(), lr=optimizer.param_groups[0]["lr"])',
    'torch.optim.SGD(model.parameters(), lr=optimizer.param_groups[0]["lr"])')
# its correct twin, to show that the stale gradient changes the update
CLEARED = BAD.replace("        outer.backward()", "        optimizer.zero_grad()\n        outer.backward()")


def _gg101(source):
    return [c for c in codes(source) if c == "GG101"]


def _weights_after(source, stale: bool):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    if stale:  # garbage in `.grad` during every step of the program's own optimizer class (put back after)
        for cls in [v for v in namespace.values() if isinstance(v, type) and "step" in vars(v)]:
            def step(self, *args, _step=cls.step):
                held = [p.grad for p in model.parameters()]
                for p in model.parameters():
                    p.grad = torch.full_like(p, 5.0)
                try:
                    return _step(self, *args)
                finally:
                    for p, g in zip(model.parameters(), held):
                        p.grad = g
            cls.step = step
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
            for _ in range(3)]
    namespace["train"](model, data, torch.optim.SGD(model.parameters(), lr=0.1))
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_a_step_given_the_loss_reads_no_grad_and_is_not_reported():
    assert torch.allclose(_weights_after(GOOD, stale=True), _weights_after(GOOD, stale=False))
    assert _gg101(GOOD) == []


def test_negative_control_a_step_that_reads_stale_grad_is_reported():
    assert not torch.allclose(_weights_after(BAD, stale=False), _weights_after(CLEARED, stale=False))
    assert "GG101" in _gg101(BAD)


def _renamed(source: str) -> str:
    for old, new in (("inner_optimizer", "adapt_opt"), ("loss_inner", "support_obj"), ("DiffSGD", "Functional"),
                     ("inner_loop", "adapted"), ("model", "net")):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def _in_a_helper(source: str) -> str:
    """The inner adaptation moved into a function of its own."""
    body = """        with inner_loop(model, optimizer) as (inner_model, inner_optimizer):
            loss_inner = 0
            for xs, ys in zip(x.split(2), y.split(2)):
                loss_inner += ((inner_model(xs) - ys) ** 2).mean() / 2
            inner_optimizer.step(loss_inner)
            outer = ((model(x) - y) ** 2).mean()
"""
    assert body in source
    helper = "def adapt(model, optimizer, x, y):\n" + body.replace("\n        ", "\n    ")[4:] + "    return outer\n\n\n"
    return source.replace(body, "        outer = adapt(model, optimizer, x, y)\n").replace("def train(", helper + "def train(")


def test_renamed_and_moved_into_a_helper_keeps_the_verdict():
    for source in (_renamed(GOOD), _in_a_helper(GOOD), _renamed(_in_a_helper(GOOD))):
        assert source != GOOD
        assert torch.allclose(_weights_after(source, stale=True), _weights_after(source, stale=False))
        assert _gg101(source) == []
    assert "GG101" in _gg101(_renamed(BAD))
