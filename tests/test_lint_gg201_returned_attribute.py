"""GG201 for a loss a per-batch method sets on its object, back-propagates and returns: ``self.loss = a + b;
self.loss.backward(); return self.loss, None, {}``, summed by the caller into a running total (the published
memory leak of a ranking library's trainer: the total links every step's graph until it is reset).

Each program is run and judged by what the autograd graphs its total holds still reach (float64, plain
PyTorch): the total of the bad program reaches the inputs of every batch; each twin's total (the method
returns ``self.loss.item()``, or ``self.loss.detach()``, or sets the attribute from a detached value, or the
caller adds under ``torch.no_grad()``) reaches none. The linter must agree in every form: renamed (nothing
says "loss"), with the loss computed in a helper, with the training loop moved into a method, and with the
whole value returned instead of a tuple's element.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from _findings import codes
from test_lint_gg201_graph_value import _reached

PROGRAM = """\
import torch


def rank_part(scores, clicks):
    return -(clicks * torch.log_softmax(scores, -1)).sum(-1).mean()


class Ranker:
    def __init__(self, net):
        self.net = net
        self.optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def train(self, features, clicks):
        scores = self.net(features).squeeze(-1)
        rank_loss = {part}
        exam_loss = 0.5 * (scores ** 2).mean()
        self.loss = {value}
        self.optimizer.zero_grad()
        self.loss.backward()
        self.optimizer.step()
        return {ret}


{driver}
"""

DRIVER_FUNCTION = """\
def run(net, batches, every):
    model = Ranker(net)
    loss = 0.0
    for features, clicks in batches:
        {take}
        {add}
    return loss"""

DRIVER_METHOD = """\
class Runner:
    def __init__(self, net, every):
        self.model = Ranker(net)
        self.every = every

    def fit(self, batches):
        every = self.every
        loss = 0.0
        for features, clicks in batches:
            {take}
            {add}
        return loss


def run(net, batches, every):
    return Runner(net, every).fit(batches)"""

_INLINE_PART = "-(clicks * torch.log_softmax(scores, -1)).sum(-1).mean()"
_HELPER_PART = "rank_part(scores, clicks)"

# (value of self.loss, what train returns, how the caller takes it, how it adds it)
SHAPES = {
    "tuple element": ("exam_loss + rank_loss", "self.loss, None, {}",
                      "step_loss, _, summary = {call}", "loss += step_loss / every"),
    "whole value": ("exam_loss + rank_loss", "self.loss", "step_loss = {call}", "loss += step_loss / every"),
    "added directly": ("exam_loss + rank_loss", "self.loss", "pass", "loss += {call} / every"),
}
TWINS = {
    "item": ("exam_loss + rank_loss", "self.loss.item(), None, {}",
             "step_loss, _, summary = {call}", "loss += step_loss / every"),
    "detach": ("exam_loss + rank_loss", "self.loss.detach()", "step_loss = {call}", "loss += step_loss / every"),
    "no_grad": ("exam_loss + rank_loss", "self.loss, None, {}", "step_loss, _, summary = {call}",
                "with torch.no_grad():\n            loss += step_loss / every"),
}


def program(shape, helper: bool, method: bool) -> str:
    value, ret, take, add = shape
    driver = DRIVER_METHOD if method else DRIVER_FUNCTION
    call = "self.model.train(features, clicks)" if method else "model.train(features, clicks)"
    indent = "            " if method else "        "
    add = add.replace("\n        ", "\n" + indent) if method else add
    driver = driver.format(take=take.format(call=call), add=add.format(call=call))
    return PROGRAM.format(part=_HELPER_PART if helper else _INLINE_PART, value=value, ret=ret, driver=driver)


_RENAMES = {"rank_loss": "ra", "exam_loss": "ex", "step_loss": "got", "loss": "acc", "Ranker": "Box",
            "train": "tick", "rank_part": "rp", "every": "n_per"}


def renamed(source: str) -> str:
    for old, new in sorted(_RENAMES.items(), key=lambda kv: -len(kv[0])):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def _batches(n=3):
    torch.manual_seed(0)
    return [(torch.randn(4, 6, 5, dtype=torch.float64, requires_grad=True),
             (torch.rand(4, 6) < 0.5).double()) for _ in range(n)]


def _net():
    torch.manual_seed(1)
    return torch.nn.Linear(5, 1).double()


def _run(source: str):
    scope: dict = {}
    exec(compile(textwrap.dedent(source), "<program>", "exec"), scope)
    batches = _batches()
    total = scope["run"](_net(), batches, 3)
    return _reached(total, [x for x, _ in batches])


FORMS = [(h, m, r) for h in (False, True) for m in (False, True) for r in (False, True)]
_IDS = [f"{'helper' if h else 'inline'}-{'method' if m else 'function'}-{'renamed' if r else 'plain'}" for h, m, r in FORMS]


@pytest.mark.parametrize("form", FORMS, ids=_IDS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_returned_attribute_summed_by_the_caller_is_reported(shape, form):
    helper, method, rename = form
    source = program(SHAPES[shape], helper, method)
    if rename:
        source = renamed(source)
    assert _run(source) == 3  # the oracle: the total keeps every batch's graph
    assert "GG201" in codes(source)


@pytest.mark.parametrize("form", FORMS, ids=_IDS)
@pytest.mark.parametrize("twin", sorted(TWINS))
def test_its_twins_that_keep_no_graph_stay_silent(twin, form):
    helper, method, rename = form
    source = program(TWINS[twin], helper, method)
    if rename:
        source = renamed(source)
    assert _run(source) == 0
    assert "GG201" not in codes(source)


def test_an_attribute_set_from_a_detached_value_is_no_loss():
    # the method back-propagates its local loss and returns an attribute set from the cut value
    source = program(("exam_loss + rank_loss", "self.last", "step_loss = {call}", "loss += step_loss / every"),
                     False, False).replace("        self.loss.backward()\n",
                                           "        self.loss.backward()\n        self.last = self.loss.detach()\n")
    assert _run(source) == 0
    assert "GG201" not in codes(source)
    bad = source.replace("self.last = self.loss.detach()", "self.last = self.loss * 1.0")
    assert _run(bad) == 3
    assert "GG201" in codes(bad)
