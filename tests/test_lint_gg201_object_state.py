"""GG201 on a model output handed to an object's method that keeps it in the object's state.

Each program is run (float64, plain PyTorch, no gradguard): after the loop, the object's state is searched for
a tensor whose autograd graph still reaches the model's output of the *first* iteration (the graph of every
step kept alive). The linter must report GG201 exactly where the run finds that; the same programs with the
names changed read the same, and the negative controls (the method cuts, the caller cuts, the state is reset
each iteration, the value is graph-free, the object lives one iteration) stay silent.
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg

PROGRAM = """\
import torch
import torch.nn.functional as F


class {cls}:
    def __init__(self):
        self.{state} = {start}
        self.count = 0

    def {method}(self, pred, target):
{body}
        self.count += 1

    def reset(self):
        self.{state} = {start}


def run(model, batches):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    {obj} = {cls}()
    firsts = []
    for x, y in batches:
{before}        out = model(x)
        firsts.append(out)
        loss = F.mse_loss(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        {obj}.{method}({arg}, y)
    return {obj}, firsts[0]
"""

SUM = "        value = torch.mean((pred - target) ** 2)\n        self.{state} = self.{state} + value"
APPEND = "        self.{state}.append((pred - target).abs().mean())"
KEYED = "        self.{state}['mae'].append((pred - target).abs().mean())"

NAMES = [dict(cls="MeanSquaredError", state="total", method="process", obj="metric"),
         dict(cls="Tracker", state="kept", method="update", obj="tracker")]

# (name, body, start, argument, before, caught)
PROGRAMS = [
    ("sum", SUM, "0.0", "out", "", True),
    ("append", APPEND, "[]", "out", "", True),
    ("keyed-append", KEYED, "{'mae': []}", "out", "", True),
    ("caller-detaches", SUM, "0.0", "out.detach()", "", False),
    ("method-detaches", "        value = torch.mean((pred.detach() - target) ** 2)\n        self.{state} = self.{state} + value",
     "0.0", "out", "", False),
    ("number", "        self.{state} = self.{state} + torch.mean((pred - target) ** 2).item()", "0.0", "out", "", False),
    ("graph-free", "        self.{state} = self.{state} + (pred.argmax(-1) == target.argmax(-1)).sum()", "0.0", "out", "", False),
    ("target-only", SUM.replace("(pred - target)", "(target - 1.0)"), "0.0", "out", "", False),
    ("reset-each-iteration", SUM, "0.0", "out", "        {obj}.reset()\n", False),
]


def _program(names, body, start, arg, before):
    return PROGRAM.format(body=body.format(**names), start=start, arg=arg, before=before.format(**names), **names)


def _keeps_first_graph(source: str, state: str) -> bool:
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()
    batches = [(torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)) for _ in range(4)]
    obj, first = scope["run"](model, batches)
    held = getattr(obj, state)
    tensors = []
    for v in (held.values() if isinstance(held, dict) else [held]):
        tensors.extend(v if isinstance(v, list) else [v])
    target = first.grad_fn
    seen, stack = set(), [t.grad_fn for t in tensors if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        if fn is target:
            return True
        seen.add(id(fn))
        stack.extend(f for f, _ in fn.next_functions)
    return False


@pytest.mark.parametrize("names", NAMES, ids=["metric", "renamed"])
@pytest.mark.parametrize("name,body,start,arg,before,caught", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_a_model_output_kept_by_an_objects_state(names, name, body, start, arg, before, caught):
    source = _program(names, body, start, arg, before)
    assert _keeps_first_graph(source, names["state"]) is caught, name  # the run is the reference
    codes = [f.code for f in gg.lint_source(source, "train.py")]
    assert codes == (["GG201"] if caught else []), (name, codes)


def test_an_object_built_in_each_iteration_is_silent():
    names = NAMES[0]
    source = _program(names, SUM, "0.0", "out", "").replace(
        "    {obj} = {cls}()\n".format(**names), "    {obj} = None\n".format(**names)).replace(
        "        out = model(x)\n", "        out = model(x)\n        {obj} = {cls}()\n".format(**names), 1)
    assert _keeps_first_graph(source, names["state"]) is False
    assert [f.code for f in gg.lint_source(source, "train.py")] == []
