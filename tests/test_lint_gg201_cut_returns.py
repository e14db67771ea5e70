"""GG201: a total of what a helper returns, where every return of the helper cuts the graph.

``def training_step(self, batch): ...; loss.backward(); return loss.detach()`` and
``tr_loss += self.training_step(batch)`` in the loop (the HF Trainer's shape): the
total sums tensors without a graph. Each program is run: what the linter says
must match whether the total really holds an autograd graph (``grad_fn``) after
the loop. Negative controls: the helper returning the loss itself, or cutting it
on one return only, is still reported.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

METHOD = """\
import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def training_step(self, x, y):
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        return loss.detach()

    def train(self, data):
        tr_loss = torch.tensor(0.0)
        for x, y in data:
            tr_loss_step = self.training_step(x, y)
            tr_loss += tr_loss_step
            self.optimizer.step()
            self.optimizer.zero_grad()
        return tr_loss


def train(model, data, optimizer):
    return Trainer(model, optimizer).train(data)
"""

FUNCTION = """\
import torch


def one_update(net, opt, inputs, target):
    cost = ((net(inputs) - target) ** 2).mean()
    cost.backward()
    opt.step()
    opt.zero_grad()
    return cost.detach().to("cpu")


def train(model, data, optimizer):
    running_loss = 0.0
    for x, y in data:
        step_loss = one_update(model, optimizer, x, y)
        running_loss += step_loss
    return running_loss
"""

# an evaluation loop (no backward, no torch.no_grad()) summing what a helper returns detached
EVAL_METHOD = """\
import torch


class Evaluator:
    def __init__(self, model):
        self.model = model

    def eval_step(self, x, y):
        loss = ((self.model(x) - y) ** 2).mean()
        return loss.detach()

    def run(self, data):
        val_loss = 0.0
        for x, y in data:
            batch_loss = self.eval_step(x, y)
            val_loss += batch_loss
        self.history = [val_loss]


def train(model, data, optimizer):
    ev = Evaluator(model)
    ev.run(data)
    return ev.history[0]
"""

EVAL_FUNCTION = """\
import torch


def score(net, inputs, target):
    nll = ((net(inputs) - target) ** 2).mean()
    return nll.item()


def train(model, data, optimizer):
    total_loss = 0.0
    for x, y in data:
        loss = score(model, x, y)
        total_loss += loss
    results = {"validation": total_loss}
    return torch.as_tensor(results["validation"])
"""

GOOD = {"method": METHOD, "function": FUNCTION, "eval-method": EVAL_METHOD, "eval-function": EVAL_FUNCTION}
BAD = {
    "method": METHOD.replace("return loss.detach()", "return loss"),
    "eval-method": EVAL_METHOD.replace("return loss.detach()", "return loss"),
    "function": FUNCTION.replace('return cost.detach().to("cpu")', 'if cost > 1e9:\n        return cost.detach()\n    return cost'),
}


def _gg201(source):
    return [c for c in codes(source) if c == "GG201"]


def _holds_graph(source) -> bool:
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)) for _ in range(3)]
    total = namespace["train"](model, data, torch.optim.SGD(model.parameters(), lr=0.1))
    return isinstance(total, torch.Tensor) and total.grad_fn is not None


@pytest.mark.parametrize("form", sorted(GOOD))
def test_a_total_of_a_helper_that_returns_the_loss_detached_is_not_reported(form):
    assert not _holds_graph(GOOD[form])
    assert _gg201(GOOD[form]) == []


@pytest.mark.parametrize("form", sorted(BAD))
def test_negative_control_a_helper_returning_the_loss_itself_is_still_reported(form):
    assert BAD[form] != GOOD[form]
    assert _holds_graph(BAD[form])
    assert _gg201(BAD[form]) == ["GG201"]


@pytest.mark.parametrize("source", [METHOD, EVAL_METHOD], ids=["train", "eval"])
def test_renamed_helper_gives_the_same_verdict(source):
    renamed = source.replace("training_step", "fwd_bwd").replace("eval_step", "crunch").replace("tr_loss", "acc_loss")
    assert _gg201(renamed) == []
    assert _gg201(renamed.replace("return loss.detach()", "return loss")) == ["GG201"]
