"""GG201: a list bound afresh by each call, in a loop each iteration of which builds a model and an optimizer of
its own, trains it and appends one loss of it, links no step's graph across iterations.

Each loss appended is computed after its own throwaway model's last step, and the list dies with the call
(the caller rebinds what it returns): nothing outlives one call, and no graph spans two models' training.
The program is run in float64 and that is checked on what the list holds: every entry's graph reaches only the
parameters of its own model, the final weights of that model. The linter says nothing, as a method or a
function, renamed. Negative controls: one model (and optimizer) built once outside the loop, trained across the
iterations while the list collects its losses (the graphs of many steps of one model linked) is still
reported, and so is the fresh-model loop whose returned list a caller adds into a total that outlives it.
"""

from __future__ import annotations

import re
import textwrap

import torch

from _findings import codes

FRESH = """\
import torch
import torch.nn as nn


class Probe:
    def __init__(self, features, steps, lr):
        self.features, self.steps, self.lr = features, steps, lr
        self.loss_fn = nn.MSELoss()

    def fixed_length(self, x, y):
        losses = []
        for task in range(x.shape[0]):
            head = nn.Linear(self.features, 1).double()
            optimiser = torch.optim.SGD(head.parameters(), lr=self.lr)
            for i in range(self.steps):
                optimiser.zero_grad()
                support_loss = self.loss_fn(head(x[task]), y[task])
                support_loss.backward()
                optimiser.step()
            support_loss = self.loss_fn(head(x[task]), y[task])
            losses.append(support_loss)
        return losses


def run(x, y):
    probe = Probe(3, 4, 0.1)
    for batch in range(2):
        losses = probe.fixed_length(x, y)
    return losses
"""

AS_FUNCTION = """\
import torch
import torch.nn as nn


def evaluate_tasks(x, y, steps, lr):
    losses = []
    for task in range(x.shape[0]):
        head = nn.Linear(3, 1).double()
        optimiser = torch.optim.SGD(head.parameters(), lr=lr)
        for i in range(steps):
            optimiser.zero_grad()
            support_loss = ((head(x[task]) - y[task]) ** 2).mean()
            support_loss.backward()
            optimiser.step()
        support_loss = ((head(x[task]) - y[task]) ** 2).mean()
        losses.append(support_loss)
    return losses


def run(x, y):
    for batch in range(2):
        losses = evaluate_tasks(x, y, 4, 0.1)
    return losses
"""

# negative control: one model for all the iterations (a new optimizer over it each time), its back-propagated
# training loss appended at every step: the list links the graphs of many steps of one model
SHARED = """\
import torch
import torch.nn as nn


def evaluate_tasks(x, y, steps, lr):
    losses = []
    head = nn.Linear(3, 1).double()
    for task in range(x.shape[0]):
        optimiser = torch.optim.SGD(head.parameters(), lr=lr)
        optimiser.zero_grad()
        support_loss = ((head(x[task]) - y[task]) ** 2).mean()
        support_loss.backward()
        optimiser.step()
        losses.append(support_loss)
    return losses


def run(x, y):
    for batch in range(2):
        losses = evaluate_tasks(x, y, 4, 0.1)
    return losses
"""

# negative control: the caller adds each call's list into a history that outlives it
KEPT = AS_FUNCTION.replace(
    "def run(x, y):\n    for batch in range(2):\n        losses = evaluate_tasks(x, y, 4, 0.1)\n    return losses\n",
    "def run(x, y):\n    history = []\n    for batch in range(2):\n        history += evaluate_tasks(x, y, 4, 0.1)\n    return history\n")


def _gg201(source):
    return [c for c in codes(source) if c == "GG201"]


def _leaves(t):
    out, seen, pending = set(), set(), [t.grad_fn]
    while pending:
        fn = pending.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if hasattr(fn, "variable"):
            out.add(id(fn.variable))
        pending.extend(f for f, _ in fn.next_functions)
    return out


def _run(source):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<probe>", "exec"), namespace)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 3, generator=g, dtype=torch.float64)
    y = torch.randn(3, 5, 1, generator=g, dtype=torch.float64)
    return namespace["run"](x, y)


def _renamed(source):
    for old, new in (("losses", "history_of_tasks"), ("head", "clf"), ("optimiser", "o"), ("support_loss", "val"),
                     ("fixed_length", "adapt"), ("Probe", "Few"), ("evaluate_tasks", "adapt_all")):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def test_each_entry_holds_the_graph_of_its_own_throwaway_model_only():
    for source in (FRESH, AS_FUNCTION):
        losses = _run(source)
        leaves = [_leaves(l) for l in losses]
        assert all(leaves) and all(not (a & b) for i, a in enumerate(leaves) for b in leaves[i + 1:])
        assert _gg201(source) == [], source


def test_renamed_forms_are_not_reported():
    for source in (FRESH, AS_FUNCTION):
        renamed = _renamed(source)
        assert renamed != source
        assert _gg201(renamed) == [], renamed


def test_negative_control_one_model_trained_across_the_iterations_is_reported():
    losses = _run(SHARED)
    leaves = [_leaves(l) for l in losses]
    assert leaves[0] & leaves[1]  # the graphs of one model's successive steps, held in one list
    assert _gg201(SHARED) == ["GG201"]
    assert _gg201(_renamed(SHARED)) == ["GG201"]


def test_negative_control_a_caller_that_keeps_every_list_is_reported():
    assert len(_run(KEPT)) == 6  # the history holds every call's graphs
    assert _gg201(KEPT) != []


def test_negative_control_every_training_step_of_each_model_appended_is_reported():
    # the fresh models' training losses of every step, not one loss per model: each entry's graph reaches
    # the same parameters as its model's other entries
    source = AS_FUNCTION.replace(
        "            optimiser.step()\n        support_loss = ((head(x[task]) - y[task]) ** 2).mean()\n        losses.append(support_loss)\n",
        "            optimiser.step()\n            losses.append(support_loss)\n")
    assert source != AS_FUNCTION
    losses = _run(source)
    assert _leaves(losses[0]) & _leaves(losses[1])
    assert _gg201(source) == ["GG201"]
