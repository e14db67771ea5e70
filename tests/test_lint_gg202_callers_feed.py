"""GG202 reads what the module's callers in the file feed it: a metric module whose state grows from its inputs
keeps every step's graph only where a caller hands it a value with a graph.

Each program is run (float64, plain PyTorch, no gradguard) and the module's state is searched for a graph that
still reaches the first iteration's output; the linter must report GG202 exactly there. Where the file does not
show every call (the object handed on), or the module's own parameters feed the state, it still reports. (The
targets are made in the loop from torch's random functions, which the value model proves graph-free; a batch
read from a loader is not proved so, and a module fed one stays reported.)
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg

PROGRAM = """\
import torch
import torch.nn.functional as F


class RunningError(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sum_squared_error = torch.zeros((), dtype=torch.float64)
{extra_init}
    def forward(self, preds, target):
        self.sum_squared_error = self.sum_squared_error + torch.sum((preds{use_param} - target) ** 2)
        return self.sum_squared_error


def log_it(metric, a, b):
    return metric(a, b)


def run(model, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    metric = RunningError()
    firsts = []
    for _ in range(steps):
        x, y = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)
        out = model(x)
        firsts.append(out)
        loss = F.mse_loss(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        {call}
    return metric.sum_squared_error, firsts[0]
"""

PARAM_INIT = "        self.scale = torch.nn.Parameter(torch.ones((), dtype=torch.float64))\n"

# (name, call, extra __init__, use of a parameter, the run keeps the first graph, reported)
PROGRAMS = [
    ("fed-the-output", "metric(out, y)", "", "", True, True),
    ("fed-detached", "metric(out.detach(), y)", "", "", False, False),
    ("fed-detached-keyword", "metric(preds=out.detach(), target=y)", "", "", False, False),
    ("fed-detached-arithmetic", "metric(out.detach() * 2, y)", "", "", False, False),
    # not every call is seen: the object is handed to a function
    ("handed-on", "log_it(metric, out.detach(), y)", "", "", False, True),
    # the module's own parameter carries a graph into the state whatever the caller feeds
    ("own-parameter", "metric(out.detach(), y)", PARAM_INIT, " * self.scale", True, True),
]


def _keeps_first_graph(source: str) -> bool:
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()
    state, first = scope["run"](model, 4)
    fn = state.grad_fn
    seen, stack = set(), [fn]
    while stack:
        f = stack.pop()
        if f is None or id(f) in seen:
            continue
        if f is first.grad_fn:
            return True
        seen.add(id(f))
        stack.extend(g for g, _ in f.next_functions)
    return False


@pytest.mark.parametrize("name,call,extra,use,keeps,reported", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_what_the_callers_feed_decides(name, call, extra, use, keeps, reported):
    source = PROGRAM.format(call=call, extra_init=extra, use_param=use)
    if name != "own-parameter":
        assert _keeps_first_graph(source) is keeps, name  # the run is the reference
    else:
        # the parameter's graph (not the output's) is chained step after step
        scope: dict = {}
        exec(compile(source, "<program>", "exec"), scope)
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2).double()
        state, _ = scope["run"](model, 3)
        assert state.grad_fn is not None
    codes = [f.code for f in gg.lint_source(source, "train.py")]
    assert ("GG202" in codes) is reported, (name, codes)
