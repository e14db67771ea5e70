"""GG201: totals that keep no graph beyond one update.

Three shapes real code writes, each run in float64 with the graph a total holds counted (the nodes reachable
from its ``grad_fn``), against a negative control that the linter still reports:

* a loss scored on a forward run under ``torch.no_grad()`` earlier in the same function, against the
  loader's targets: the total holds no graph (control: the forward outside ``no_grad``, and a head applied
  outside ``no_grad`` to the no-grad features, whose graph the total keeps);
* a per-task total a function returns (MAML's ``fit_task``), summed by one caller into the meta-objective it
  back-propagates, and dropped by another that sums the accuracy beside it (control: that caller sums the
  returned loss, graph and all);
* a total bound afresh by a function that its caller runs once per update, stepping after it (control: the
  function loops over the whole loader and steps inside, so the total spans every update of the epoch).
"""

from __future__ import annotations

import re
import textwrap

import torch

from _findings import codes

NO_GRAD = """\
import torch


def inference(net, head, loader, criterion):
    inf_loss = 0
    for x, y in loader:
        with torch.no_grad():
            score = net(x)
        loss = criterion(score, y.double())
        inf_loss += loss.float()
    return inf_loss
"""
NO_GRAD_BAD = NO_GRAD.replace("        with torch.no_grad():\n            score = net(x)\n", "        score = net(x)\n")
HEAD_BAD = NO_GRAD.replace("            score = net(x)\n", "            feats = net(x)\n        score = head(feats)\n")

MAML = """\
import torch


def fit_task(model, task, lr_inner):
    (xs, ys), queries = task
    inner = ((model(xs) - ys) ** 2).mean()
    grads = torch.autograd.grad(inner, list(model.parameters()), create_graph=True)
    w, b = [p - lr_inner * g for p, g in zip(model.parameters(), grads)]
    test_loss = 0
    for xq, yq in queries:
        batch_loss = ((xq @ w.t() + b - yq) ** 2).mean()
        test_loss += batch_loss
    test_loss /= len(queries)
    accuracy = float(test_loss.detach())
    return test_loss, accuracy


def maml(model, tasks, lr):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for batch in tasks:
        meta = 0
        for task in batch:
            task_loss, _ = fit_task(model, task, 0.1)
            meta += task_loss
        meta = meta / len(batch)
        optimizer.zero_grad()
        meta.backward()
        optimizer.step()


def average_acc(model, tasks):
    total_acc = 0
    for batch in tasks:
        for task in batch:
            loss, acc = fit_task(model, task, 0.1)
            total_acc += acc
    return total_acc
"""
MAML_BAD = MAML.replace("            total_acc += acc", "            total_acc += loss")

PER_UPDATE = """\
import torch


class Learner:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def get_loss(self, batch):
        mean_loss = torch.tensor(0.0, dtype=torch.float64)
        for x, y in zip(*batch):
            loss = ((self.model(x) - y) ** 2).mean()
            loss.backward()
            mean_loss += loss
        mean_loss.div_(len(batch[0]))
        return mean_loss, {"mean_loss": mean_loss.item()}

    def train(self, loader):
        for batch in loader:
            self.optimizer.zero_grad()
            total, results = self.get_loss(batch)
            self.optimizer.step()
            yield total
"""
PER_UPDATE_BAD = """\
import torch


class Learner:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def get_loss(self, loader):
        mean_loss = torch.tensor(0.0, dtype=torch.float64)
        for x, y in loader:
            self.optimizer.zero_grad()
            loss = ((self.model(x) - y) ** 2).mean()
            loss.backward()
            self.optimizer.step()
            mean_loss += loss
        return mean_loss, {"mean_loss": mean_loss.item()}

    def train(self, loader):
        for _ in range(1):
            total, results = self.get_loss(loader)
            yield total
"""


def _gg201(source):
    return [c for c in codes(source) if c == "GG201"]


def _nodes(t) -> int:
    """How many autograd nodes a value keeps alive (0 for a number or a tensor without a graph)."""
    fn = getattr(t, "grad_fn", None)
    seen, todo = set(), [fn] if fn is not None else []
    while todo:
        n = todo.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        todo.extend(f for f, _ in n.next_functions)
    return len(seen)


def _ns(source):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<program>", "exec"), namespace)
    torch.manual_seed(0)
    return namespace, torch.nn.Linear(3, 1).double()


def _batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
            for _ in range(n)]


def _inference(source):
    ns, model = _ns(source)
    head = torch.nn.Linear(1, 1).double()
    return ns["inference"](model, head, _batches(3), lambda s, y: ((s - y) ** 2).mean())


def test_a_loss_scored_on_a_no_grad_forward_keeps_no_graph():
    assert _nodes(_inference(NO_GRAD)) == 0
    assert _gg201(NO_GRAD) == []
    for bad in (NO_GRAD_BAD, HEAD_BAD):
        assert _nodes(_inference(bad)) > 0
        assert "GG201" in _gg201(bad)


def _tasks():
    data = _batches(12)
    return [[(data[i], data[i + 1:i + 3]) for i in (0, 3)], [(data[i], data[i + 1:i + 3]) for i in (6, 9)]]


def test_a_task_total_summed_into_the_meta_objective_is_no_log():
    ns, model = _ns(MAML)
    ns["maml"](model, _tasks(), 0.05)
    assert _nodes(ns["average_acc"](model, _tasks())) == 0
    assert _gg201(MAML) == []
    ns, model = _ns(MAML_BAD)
    assert _nodes(ns["average_acc"](model, _tasks())) > 0
    assert "GG201" in _gg201(MAML_BAD)


def _per_update_nodes(source, n):
    ns, model = _ns(source)
    loader = [tuple(zip(*_batches(2)))] * n if source is PER_UPDATE else _batches(2 * n)
    return max(_nodes(t) for t in ns["Learner"](model, 0.05).train(loader))


def test_a_total_bound_afresh_once_per_update_does_not_grow():
    # one update's graph, whatever the run's length
    assert _per_update_nodes(PER_UPDATE, 2) == _per_update_nodes(PER_UPDATE, 6)
    assert _gg201(PER_UPDATE) == []
    # the epoch function's total grows with the loader
    assert _per_update_nodes(PER_UPDATE_BAD, 6) > _per_update_nodes(PER_UPDATE_BAD, 2)
    assert "GG201" in _gg201(PER_UPDATE_BAD)


def _renamed(source):
    for old, new in (("inf_loss", "acc_l"), ("score", "pred"), ("criterion", "crit"), ("test_loss", "q_sum"),
                     ("fit_task", "adapt"), ("meta", "outer"), ("mean_loss", "tot"), ("get_loss", "run_batch"),
                     ("total_acc", "hits")):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def test_renamed_keeps_the_verdicts():
    for good in (NO_GRAD, MAML, PER_UPDATE):
        assert _renamed(good) != good and _gg201(_renamed(good)) == []
    for bad in (NO_GRAD_BAD, HEAD_BAD, MAML_BAD, PER_UPDATE_BAD):
        assert "GG201" in _gg201(_renamed(bad))
