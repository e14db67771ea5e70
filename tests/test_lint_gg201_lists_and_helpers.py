"""GG201: what a run-long total holds, read through ``sum(list)`` and through a helper's return.

Two shapes real code writes: a list bound afresh each step and filled with the loss
(``parts = []; parts.append(loss); total += sum(parts)``), and a helper of the file that hands
the loss back (``def loss_value(l): return l``; ``total += loss_value(loss)``). Either way the
total links every step's graph. Each program is run: the linter's verdict must match whether the
total really holds an autograd graph (``grad_fn``) after the loop. Negative controls: the same
programs cutting the graph (``parts.append(loss.item())``, ``sum(parts).item()``, a helper returning
``l.item()`` / ``float(l)`` / ``l.detach()``) stay silent.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

LIST = """\
import torch


def train(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        parts = []
        parts.append(loss)
        total += sum(parts)
    return total
"""

LIST_METHOD = """\
import torch


class Trainer:
    def __init__(self, net, opt):
        self.net, self.opt = net, opt
        self.seen = 0.0

    def objective(self, a, b):
        return (self.net(a) - b).abs().mean()

    def fit(self, batches):
        for a, b in batches:
            terms = []
            err = self.objective(a, b)
            terms.append(err)
            terms.append(0.1 * err)
            self.opt.zero_grad()
            err.backward()
            self.opt.step()
            self.seen += sum(terms)
        return self.seen


def train(model, loader, optimizer):
    return Trainer(model, optimizer).fit(loader)
"""

HELPER = """\
import torch


def loss_value(l):
    return l


def train(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        total += loss_value(loss)
    return total
"""

HELPER_METHOD = """\
import torch


class Trainer:
    def __init__(self, net, opt):
        self.net, self.opt = net, opt
        self.running = 0.0

    def as_logged(self, value, weight=1.0):
        return value * weight

    def fit(self, batches):
        for a, b in batches:
            self.opt.zero_grad()
            err = (self.net(a) - b).abs().mean()
            err.backward()
            self.opt.step()
            self.running += self.as_logged(err, len(a))
        return self.running


def train(model, loader, optimizer):
    return Trainer(model, optimizer).fit(loader)
"""

BAD = {"list": LIST, "list_method": LIST_METHOD, "helper": HELPER, "helper_method": HELPER_METHOD}
GOOD = {
    "list_item": LIST.replace("parts.append(loss)", "parts.append(loss.item())"),
    "list_sum_item": LIST.replace("total += sum(parts)", "total += sum(parts).item()"),
    "list_method_detach": LIST_METHOD.replace("self.seen += sum(terms)", "self.seen += float(sum(terms))"),
    "helper_item": HELPER.replace("    return l\n", "    return l.item()\n"),
    "helper_float": HELPER.replace("    return l\n", "    return float(l)\n"),
    "helper_detach": HELPER.replace("    return l\n", "    return l.detach()\n"),
    "helper_method_item": HELPER_METHOD.replace("return value * weight", "return value.item() * weight"),
}
RENAMED = {
    "list": LIST.replace("parts", "bucket").replace("loss", "objective_value").replace("total", "acc"),
    "helper": HELPER.replace("loss_value", "fetch").replace("loss", "e").replace("total", "acc"),
}


def _gg201(source):
    return [c for c in codes(source) if c == "GG201"]


def _holds_graph(source) -> bool:
    """The reference: run the program on a small model and look at what the total holds."""
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    g = torch.Generator().manual_seed(1)
    loader = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
              for _ in range(3)]
    total = namespace["train"](model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
    return isinstance(total, torch.Tensor) and total.grad_fn is not None


@pytest.mark.parametrize("form", sorted(BAD))
def test_a_total_of_the_loss_through_a_list_or_a_helper_is_found(form):
    assert _holds_graph(BAD[form])
    assert _gg201(BAD[form]) == ["GG201"]


@pytest.mark.parametrize("form", sorted(GOOD))
def test_negative_control_a_cut_value_through_a_list_or_a_helper_is_not_reported(form):
    assert GOOD[form] not in BAD.values()
    assert not _holds_graph(GOOD[form])
    assert _gg201(GOOD[form]) == []


@pytest.mark.parametrize("form", sorted(RENAMED))
def test_renamed_programs_give_the_same_verdict(form):
    assert _holds_graph(RENAMED[form])
    assert _gg201(RENAMED[form]) == ["GG201"]


def test_negative_control_a_list_bound_once_per_step_and_back_propagated_is_no_total():
    # the list's sum is the step's loss itself: it is back-propagated, and nothing outlives the step
    source = LIST.replace(
        "        loss.backward()\n        optimizer.step()\n        parts = []\n        parts.append(loss)\n"
        "        total += sum(parts)\n",
        "        parts = []\n        parts.append(loss)\n        step_loss = sum(parts)\n        step_loss.backward()\n"
        "        optimizer.step()\n        total += step_loss.item()\n")
    assert source != LIST
    assert not _holds_graph(source)
    assert _gg201(source) == []
