"""GG201: a count read from the batch (``data.num_graphs``) is not a loss, even when the loss reads the batch.

``data = data.to(device)``; ``loss = (model(data) - data.y).abs().mean()``;
``total += loss.item() * data.num_graphs``; ``count += data.num_nodes``: the
total is a Python float, the count an int. The batch the loop iterates over holds
no graph, so reading it into the loss does not make it one. Each program is run:
what the linter says of the total must match whether the total really holds an
autograd graph (``grad_fn``) after the loop. Negative controls: the real bug
``total += loss * data.num_graphs`` is still found, and so is a loop target
rebound to a model output.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

HEADER = """\
import torch


class Batch:
    def __init__(self, x, y):
        self.x, self.y = x, y
        self.num_graphs = x.shape[0]
        self.node_norm = torch.ones(x.shape[0], 1)

    def to(self, device):
        return Batch(self.x.to(device), self.y.to(device))

    def cpu(self):
        return self.to("cpu")
"""

FUNCTION = HEADER + """

def train(model, loader, optimizer, device="cpu"):
    total_loss = total_examples = 0
    for data in loader:
        data = data.to(device)
        optimizer.zero_grad()
        loss = ((model(data.x) - data.y).abs() * data.node_norm).mean()
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * data.num_graphs
        total_examples += data.num_graphs
    return total_loss, total_examples
"""

METHOD = HEADER + """

class Runner:
    def __init__(self, net, opt):
        self.net, self.opt = net, opt

    def objective(self, b):
        return (self.net(b.x) - b.y).pow(2).mean()

    def epoch(self, batches):
        running, seen = 0.0, 0
        for b in batches:
            b = b.cpu().to("cpu")
            self.opt.zero_grad()
            err = self.objective(b) * b.node_norm.mean()
            err.backward()
            self.opt.step()
            running += err.item() * b.num_graphs
            seen += b.num_graphs
        return running, seen


def train(model, loader, optimizer):
    return Runner(model, optimizer).epoch(loader)
"""

GOOD = {"function": FUNCTION, "method": METHOD}
BAD = {
    "function": FUNCTION.replace("total_loss += loss.item() * data.num_graphs", "total_loss += loss * data.num_graphs"),
    "method": METHOD.replace("running += err.item() * b.num_graphs", "running += err * b.num_graphs"),
}
REBOUND = HEADER + """

def train(model, loader, optimizer):
    total = 0
    for data in loader:
        optimizer.zero_grad()
        data = model(data.x)
        loss = data.mean()
        loss.backward()
        optimizer.step()
        total += data.sum() * 2
    return total, 0
"""


def _gg201(source):
    return [c for c in codes(source) if c == "GG201"]


def _holds_graph(source) -> bool:
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    g = torch.Generator().manual_seed(1)
    loader = [namespace["Batch"](torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)) for _ in range(3)]
    total, count = namespace["train"](model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
    assert not isinstance(count, torch.Tensor)  # the count of the batch is a plain number
    return isinstance(total, torch.Tensor) and total.grad_fn is not None


@pytest.mark.parametrize("form", sorted(GOOD))
def test_a_float_times_a_count_of_the_batch_is_not_reported(form):
    assert not _holds_graph(GOOD[form])
    assert _gg201(GOOD[form]) == []


@pytest.mark.parametrize("form", sorted(BAD))
def test_negative_control_the_loss_tensor_times_the_count_is_still_found(form):
    assert BAD[form] != GOOD[form]
    assert _holds_graph(BAD[form])
    assert _gg201(BAD[form]) == ["GG201"]


def test_negative_control_a_loop_target_rebound_to_a_model_output_is_a_tensor_with_graph():
    assert _holds_graph(REBOUND)
    assert _gg201(REBOUND) == ["GG201"]


def test_renamed_batch_gives_the_same_verdict():
    renamed = FUNCTION.replace("data", "graph_batch").replace("total_loss", "acc")
    assert _gg201(renamed) == []
    assert _gg201(renamed.replace("acc += loss.item() *", "acc += loss *")) == ["GG201"]
