"""GG201 / GG202: a value that links no new graph on each iteration (or each call) is not reported.

Shapes of real code, each run here, the truth read from the tensors it leaves (how many iterations' inputs a
kept value still reaches through its autograd graph, how many kept values have a graph at all):

* a count summed into an object's field (``self.stats.seen += self.batch_size``) beside a loss scaled by a
  hyperparameter read through several attributes (``loss * self.cfg.optim.scale``): the scale and the count
  are fields of an object the loop never binds, not losses;
* a logger whose method cuts what it is handed inside ``if torch.is_tensor(value):`` (both branches of an inner
  ``if`` cutting), then adds it into ``self.channels[key]``;
* a list of a weight the loop binds only to a cut value or to a field the constructor set
  (``alpha = self.alpha``), which then enters the loss;
* a total added to once before an unconditional ``break``: it holds one iteration's graph per call;
* a dict of totals over the entries a loss module returns cut (``{"mse": err.item(), ..., "total": err}``),
  the loop running over the totals' own keys, which leave the loss entry out;
* GG202: a state a method of the module binds afresh (``self._reset(start)``) before ``forward`` chains it.

Negative controls, each still reported and each shown by running to link every iteration's graph: the loss
itself summed into the field, the guard cutting nothing, the weight computed from a parameter on every
iteration, the loop without its ``break``, the totals' keys taking in the loss entry, the ``forward`` that does
not call the reset or calls one that leaves the state alone on some path.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes


def _run(source: str, entry: str, *args):
    scope: dict = {}
    exec(compile(textwrap.dedent(source), "<program>", "exec"), scope)
    return scope[entry](*args)


def _reached(value, inputs) -> int:
    """How many of ``inputs`` (leaves requiring grad) ``value``'s autograd graph still reaches."""
    if not isinstance(value, torch.Tensor) or value.grad_fn is None:
        return 0
    ids = {id(t) for t in inputs}
    seen, todo, found = set(), [value.grad_fn], set()
    while todo:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        var = getattr(fn, "variable", None)
        if var is not None and id(var) in ids:
            found.add(id(var))
        todo.extend(f for f, _ in fn.next_functions)
    return len(found)


def _batches(n=3):
    torch.manual_seed(0)
    return [(torch.randn(4, 3, dtype=torch.float64, requires_grad=True), torch.randn(4, 1, dtype=torch.float64))
            for _ in range(n)]


def _model():
    torch.manual_seed(1)
    return torch.nn.Linear(3, 1).double()


def _gg(source, code="GG201"):
    return [c for c in codes(source) if c == code]


# --- a count summed into a field, beside a loss scaled by a hyperparameter deep in a config ------------------

FIELD = """
import torch
from types import SimpleNamespace


class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt
        self.cfg = SimpleNamespace(optim=SimpleNamespace(scale=0.5))
        self.stats = SimpleNamespace(seen=0, total=0.0)
        self.batch_size = 4

    def fit(self, data):
        for x, y in data:
            loss = ((self.model(x) - y) ** 2).mean()
            (loss * self.cfg.optim.scale).backward()
            self.opt.step()
            self.opt.zero_grad()
            {total}
        return self.stats


def train(model, opt, data):
    return Trainer(model, opt).fit(data)
"""


@pytest.mark.parametrize("good", [True, False], ids=["count", "loss"])
def test_a_count_summed_into_a_field_beside_a_deeply_scaled_loss(good):
    total = "self.stats.seen += self.batch_size" if good else "self.stats.total += loss"
    source = FIELD.format(total=total)
    model, batches = _model(), _batches()
    stats = _run(source, "train", model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
    kept = _reached(stats.total, [x for x, _ in batches])
    assert (kept, stats.seen) == ((0, 12) if good else (3, 0))
    assert _gg(source) == ([] if good else ["GG201"])


# --- a logger that cuts what it is handed inside `if torch.is_tensor(value):` --------------------------------

LOGGER = """
import torch


class Logger:
    def __init__(self, average=True):
        self.average = average
        self.channels = {{}}

    def add_log(self, key, value):
        if value is None:
            return
        if torch.is_tensor(value):
            if self.average:
                value = {cut}
            else:
                value = value.detach().sum().item()
        if key in self.channels:
            self.channels[key] += value
        else:
            self.channels[key] = value


def train(model, opt, data):
    logger = Logger()
    for x, y in data:
        loss = ((model(x) - y) ** 2).mean()
        logger.add_log("loss", loss)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return logger.channels["loss"]
"""


@pytest.mark.parametrize("good", [True, False], ids=["cut", "kept"])
def test_a_logger_that_cuts_a_tensor_under_an_is_tensor_guard(good):
    source = LOGGER.format(cut="value.detach().mean().item()" if good else "value.mean()")
    model, batches = _model(), _batches()
    total = _run(source, "train", model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
    assert _reached(total, [x for x, _ in batches]) == (0 if good else 3)
    assert _gg(source) == ([] if good else ["GG201"])


# --- a weight bound only to a cut or to a constructor's field, listed and entering the loss ------------------

WEIGHT = """
import torch


class Agent:
    def __init__(self, model, opt, learned):
        self.model, self.opt, self.learned = model, opt, learned
        self.log_alpha = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
        self.alpha = 0.5

    def update(self, data):
        alpha_list = []
        for x, y in data:
            if self.learned:
                alpha = {learned}
            else:
                alpha = self.alpha
            err = ((self.model(x) - y) ** 2).mean()
            loss = err + 0.01 * alpha
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()
            alpha_list.append(alpha)
        return alpha_list


def train(model, opt, data):
    return Agent(model, opt, True).update(data)
"""


@pytest.mark.parametrize("good", [True, False], ids=["cut", "parameter"])
def test_a_list_of_a_weight_bound_to_a_cut_or_a_constructor_field(good):
    source = WEIGHT.format(learned="self.log_alpha.exp().detach().item()" if good else "self.log_alpha.exp()")
    model, batches = _model(), _batches()
    kept = _run(source, "train", model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
    graphs = sum(isinstance(a, torch.Tensor) and a.grad_fn is not None for a in kept)
    assert graphs == (0 if good else 3)
    assert _gg(source) == ([] if good else ["GG201"])


# --- a total added to once, right before an unconditional `break` --------------------------------------------

ONCE = """
import torch


def train(model, opt, data, skip=1):
    total_loss = 0
    for i, (x, y) in enumerate(data):
        if i < skip:
            continue
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        total_loss += loss
        {leave}
    return total_loss
"""


@pytest.mark.parametrize("good", [True, False], ids=["break", "no-break"])
def test_a_total_added_to_once_before_a_break(good):
    source = ONCE.format(leave="break" if good else "pass")
    model, batches = _model(), _batches()
    total = _run(source, "train", model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
    assert _reached(total, [x for x, _ in batches]) == (1 if good else 2)
    assert _gg(source) == ([] if good else ["GG201"])


# --- a dict of totals over the entries a loss module returns cut -------------------------------------------

ENTRIES = """
import torch
from torch import nn


class MyLoss(nn.Module):
    def forward(self, out, y):
        err = ((out - y) ** 2).mean()
        pct = (1.0 - (out > 0).float().mean().item()) * 100
        return {{"mse": err.item(), "pct": pct, "total": err}}


def train(model, opt, data):
    criterion = MyLoss().to("cpu")
    totals = {totals}
    for x, y in data:
        parts = criterion(model(x), y)
        parts["total"].backward()
        opt.step()
        opt.zero_grad()
        for k in totals:
            totals[k] += parts[k]
    return totals
"""


@pytest.mark.parametrize("good", [True, False], ids=["cut-entries", "loss-entry"])
def test_a_dict_of_totals_over_entries_a_loss_module_returns_cut(good):
    source = ENTRIES.format(totals='{"mse": 0, "pct": 0}' if good else '{"mse": 0, "pct": 0, "total": 0}')
    model, batches = _model(), _batches()
    totals = _run(source, "train", model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
    assert max(_reached(v, [x for x, _ in batches]) for v in totals.values()) == (0 if good else 3)
    assert _gg(source) == ([] if good else ["GG201"])


# --- GG202: a state a method binds afresh before forward chains it ------------------------------------------

PLANNER = """
import torch
from torch import nn


class Planner(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3, dtype=torch.float64))
        self.state = torch.zeros(3, dtype=torch.float64)

    def _reset(self, start):
        {guard}self.state = start * 1.0

    def forward(self, x, start):
        {reset}
        for _ in range(2):
            self.state = self.state + self.w * x
        return self.state.sum()


def plan(xs, start):
    planner = Planner()
    return [planner(x, start) for x in xs]
"""


@pytest.mark.parametrize("form", ["reset", "no-reset", "reset-on-one-path"])
def test_a_state_a_method_binds_afresh_before_forward_chains_it(form):
    good = form == "reset"
    # (the reset's condition never holds here: the state is left alone, as a reset at an episode's end only would)
    guard = "if start.sum() > 1e9:\n            " if form == "reset-on-one-path" else ""
    source = PLANNER.format(reset="pass" if form == "no-reset" else "self._reset(start)", guard=guard)
    xs = [torch.randn(3, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    start = torch.randn(3, dtype=torch.float64)
    first, second = _run(source, "plan", xs, start)
    # the second call's output reaches the first call's input only where the state chains across calls
    assert _reached(second, xs[:1]) == (0 if good else 1)
    assert _gg(source, "GG202") == ([] if good else ["GG202"])
