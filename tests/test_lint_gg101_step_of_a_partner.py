"""GG101: a step handed a loss computed from the functional model it was made with reads no ``.grad``.

``higher``'s ``with innerloop_ctx(model, opt) as (fmodel, diffopt): diffopt.step(loss)`` (or ``fmodel,
diffopt = make(...)``): the stepped object comes out of one call together with its model, and the value
handed to its step is a tensor computed from that model's output (``out = fmodel(x); loss = crit(out, y)``),
not a closure. The step differentiates that tensor itself, so whatever ``.grad`` holds never reaches it.
The programs are run in float64: garbage in ``.grad`` during every inner step changes nothing (the truth),
and the linter is silent. Negative controls: the same loop stepping a torch optimizer after
``loss.backward()`` is reported (and its stale gradient changes the outer update), and so is a tuple-bound
optimizer stepped with a closure defined in the loop.
"""

from __future__ import annotations

import re

import torch

from _findings import codes
from test_lint_gg101_step_given_a_loss import _weights_after

# the clearing runs once before the loop over tasks; each task adapts a functional copy and
# back-propagates its query loss into the real model's `.grad` (a meta-batch, stepped once)
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


def criterion(out, y):
    return ((out - y) ** 2).mean()


def train(model, data, optimizer):
    optimizer.zero_grad()
    for x, y in data:
        with inner_loop(model, optimizer) as (model_local, optimizer_local):
            for _ in range(2):
                outputs = model_local(x)
                loss = criterion(outputs, y)
                optimizer_local.step(loss)
            loss = criterion(model_local(x), y)
            loss.backward()
    optimizer.step()
"""
# a torch optimizer stepped after the inner pass's backward reads `.grad`: the outer step applies the inner
# passes' gradients again (nothing clears them)
BAD = GOOD.replace("optimizer_local.step(loss)", "loss.backward()\n                optimizer_local.step()").replace(
    'DiffSGD(model.parameters(), lr=optimizer.param_groups[0]["lr"])',
    'torch.optim.SGD(model.parameters(), lr=optimizer.param_groups[0]["lr"])')
CLEARED = BAD.replace("            loss = criterion(model_local(x), y)\n",
                      "            optimizer.zero_grad()\n            loss = criterion(model_local(x), y)\n")
# made by a plain call that returns the pair, the loss a torch function of the model's output
TUPLE = GOOD.replace("@contextlib.contextmanager\ndef inner_loop(model, optimizer):\n    yield",
                     "def inner_loop(model, optimizer):\n    return").replace(
    "        with inner_loop(model, optimizer) as (model_local, optimizer_local):\n",
    "        if True:\n            model_local, optimizer_local = inner_loop(model, optimizer)\n").replace(
    "                loss = criterion(outputs, y)\n", "                loss = torch.mean((outputs - y) ** 2)\n")
# a tuple-bound optimizer handed a closure reads `.grad` (LBFGS): still reported
CLOSURE = """\
import torch


def train(model, data, prepare):
    model, optimizer = prepare(model, torch.optim.LBFGS(model.parameters()))
    for x, y in data:
        def closure():
            out = model(x)
            loss = ((out - y) ** 2).mean()
            loss.backward()
            return loss
        optimizer.step(closure)
"""


def _gg101(source):
    return [c for c in codes(source) if c == "GG101"]


def test_a_partner_step_given_the_loss_reads_no_grad_and_is_not_reported():
    for source in (GOOD, TUPLE):
        assert torch.allclose(_weights_after(source, stale=True), _weights_after(source, stale=False))
        assert _gg101(source) == []


def test_negative_controls_a_step_that_reads_grad_is_still_reported():
    assert not torch.allclose(_weights_after(BAD, stale=False), _weights_after(CLEARED, stale=False))
    assert "GG101" in _gg101(BAD)
    assert "GG101" in _gg101(CLOSURE)


def _renamed(source: str) -> str:
    for old, new in (("optimizer_local", "adapt_opt"), ("model_local", "fnet"), ("loss", "objective"),
                     ("outputs", "pred"), ("criterion", "err"), ("inner_loop", "patched")):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def _in_a_method(source: str) -> str:
    """The training function as a method of a class, the optimizer kept on ``self``."""
    head = "def train(model, data, optimizer):\n"
    at = source.index(head)
    body = source[at + len(head):].replace("optimizer", "self.optimizer").replace("self.optimizer_local", "optimizer_local")
    body = body.replace("inner_loop(model, self.optimizer)", "inner_loop(model, self.optimizer)")
    method = ("class Learner:\n    def __init__(self, optimizer):\n        self.optimizer = optimizer\n\n"
              "    def train(self, model, data):\n" + "".join("    " + line + "\n" for line in body.splitlines())
              + "\n\ndef train(model, data, optimizer):\n    Learner(optimizer).train(model, data)\n")
    return source[:at] + method


def test_renamed_and_moved_into_a_method_keeps_the_verdict():
    for source in (_renamed(GOOD), _in_a_method(GOOD), _renamed(_in_a_method(TUPLE))):
        assert source != GOOD
        assert torch.allclose(_weights_after(source, stale=True), _weights_after(source, stale=False))
        assert _gg101(source) == []
    assert "GG101" in _gg101(_renamed(BAD))
    assert "GG101" in _gg101(_in_a_method(BAD))
