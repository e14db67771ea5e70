"""GG201 on a running sum of loss tensors started by a conditional expression (RecBole's trainer:
``total_loss = loss if total_loss is None else total_loss + loss``): the total links every step's autograd
graph for the whole epoch.

Oracle: after each program runs, the autograd nodes still reachable from its total are counted (plain
``grad_fn`` walk). A program the linter reports must hold the graph of every step (more nodes than one step's
graph); a program it leaves alone must hold none. Forms: the ``is None`` start, the reversed ``is not None``
branch order, an attribute of a trainer; negative controls: the fix (``loss.item()`` in both branches) and a
loss rebuilt each iteration by the same kind of expression (no running total).
"""

import textwrap

import pytest

import gradguard as gg

PRELUDE = """
import torch
import torch.nn.functional as F
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = [(torch.randn(4, 5), torch.randn(4, 1)) for _ in range(6)]
"""

# name -> (GG201 expected, program after the prelude; `total` names what it accumulated)
PROGRAMS = {
    "is_none_start": (True, """
total = None
for x, y in data:
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    total = loss if total is None else total + loss
    loss.backward()
    optimizer.step()
"""),
    "reversed_branches": (True, """
def run_epoch(batches):
    running = None
    for inputs, targets in batches:
        optimizer.zero_grad()
        err = F.mse_loss(model(inputs), targets)
        running = running + err if running is not None else err
        err.backward()
        optimizer.step()
    return running

total = run_epoch(data)
"""),
    "trainer_attribute": (True, """
class Trainer:
    def __init__(self):
        self.epoch_loss = None

    def fit(self, batches):
        for x, y in batches:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            self.epoch_loss = loss if self.epoch_loss is None else self.epoch_loss + loss
            loss.backward()
            optimizer.step()

trainer = Trainer()
trainer.fit(data)
total = trainer.epoch_loss
"""),
    "fixed_with_item": (False, """
total = None
for x, y in data:
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    total = loss.item() if total is None else total + loss.item()
    loss.backward()
    optimizer.step()
"""),
    "rebuilt_each_iteration": (False, """
penalty = None
for x, y in data:
    optimizer.zero_grad()
    base = F.mse_loss(model(x), y)
    total = base if penalty is None else base + penalty
    total.backward()
    optimizer.step()
total = total.item()
"""),
}


def _nodes(value) -> int:
    seen, todo = set(), [getattr(value, "grad_fn", None)]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        todo += [n for n, _ in node.next_functions]
    return len(seen)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_form_against_the_graph_its_total_holds(name):
    reported, body = PROGRAMS[name]
    ns: dict = {}
    exec(compile(PRELUDE + textwrap.dedent(body), "<gg201>", "exec"), ns)
    one_step: dict = {}
    exec(PRELUDE + "\nimport torch.nn.functional as F\none = F.mse_loss(model(data[0][0]), data[0][1])\n", one_step)
    codes = [f.code for f in gg.lint_source(PRELUDE + textwrap.dedent(body), "train.py")]
    if reported:
        assert _nodes(ns["total"]) > 3 * _nodes(one_step["one"]), f"{name}: the total must link every step's graph"
        assert codes == ["GG201"], (name, codes)
    else:
        assert _nodes(ns["total"]) == 0, name
        assert codes == [], (name, codes)
