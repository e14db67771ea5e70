"""GG201 / GG202 / GG108: what a value is decides the finding, read from what the program computes.

Shapes of real code whose values carry no graph that grows, each run here with the truth read from the
tensors it leaves (``grad_fn``, and which iterations' inputs a kept value still reaches through it):

* an evaluation total of what a function returns as the second element of a tuple (``score, loss =
  evaluate(...)``): ``.item()``, or a value computed under ``torch.no_grad()`` in the function; the function
  in the same file, a method, or a function of another file of the linted tree;
* a total of values unpacked from a call (of a function handed in) inside the loop's own ``with torch.no_grad():``
  block;
* a per-item total (``loss = 0`` for every graph) added to in a ``while`` over that item's nodes, never
  back-propagated and not carried on: it holds one item's graph, let go at the next item;
* a meter whose method detaches what it is handed before its moving average;
* a total of the mean of the batches a nested training loop iterates over (detached data);
* GG202: a recurrent state set back to ``None`` before each training mini-batch by the trainer, and a
  buffer re-wrapped as a new ``nn.Parameter`` leaf;
* GG108: ``create_graph=True`` in a function stepping an optimizer built from a class its caller hands in
  (a second-order optimizer differentiates ``.grad`` in ``step``).

Negative controls, each still reported and each shown by running to keep a growing graph: the same
programs without ``no_grad`` / ``.item()`` (the total reaches every batch), the unpacking outside the block,
the per-item total bound once for all items, the meter without its detach, a true loss total beside the data
total, the state never set back (the second update's backward pass fails through the first's freed graph),
the buffer without its new leaf, and the first-order torch optimizer built in the function.
"""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
import torch

import gradguard as gg
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


def _batches(n=3, requires_grad=True):
    torch.manual_seed(0)
    return [(torch.randn(4, 3, dtype=torch.float64, requires_grad=requires_grad), torch.randn(4, 1, dtype=torch.float64))
            for _ in range(n)]


def _model():
    torch.manual_seed(1)
    return torch.nn.Linear(3, 1).double()


# --- an evaluation total of what a function returns -------------------------------------------------------

EVAL_ITEM = """
import torch

def evaluate(model, x, y):
    with torch.no_grad():
        out = model(x)
        loss_data = ((out - y) ** 2).mean()
        return out.abs().mean(), loss_data{cut}

def validation(model, batches):
    loss_val = 0
    for x, y in batches:
        score, val_loss = evaluate(model, x, y)
        loss_val += val_loss
    return loss_val
"""

EVAL_METHOD = """
import torch

class Tester:
    def __init__(self, model):
        self.model = model

    def run_batch(self, x, y):
        {guard}
            out = self.model(x)
            err = ((out - y) ** 2).mean()
            return err, out

    def validation(self, batches):
        total_loss = 0
        for x, y in batches:
            batch_loss, _ = self.run_batch(x, y)
            total_loss += batch_loss
        return total_loss

def validation(model, batches):
    return Tester(model).validation(batches)
"""


def _eval_item(good):
    # with `.item()` cut off, the value is computed under no_grad and still graph-free: the bad twin
    # computes it outside the block
    src = EVAL_ITEM.format(cut=".item()" if good else "")
    return src if good else src.replace("    with torch.no_grad():\n        out = model(x)", "    out = model(x)\n    if True:")


def _eval_method(good):
    return EVAL_METHOD.format(guard="with torch.no_grad():" if good else "if True:")


@pytest.mark.parametrize("form", [_eval_item, _eval_method])
@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_an_evaluation_total_of_a_graph_free_return(form, good):
    source = form(good)
    batches = _batches()
    total = _run(source, "validation", _model(), batches)
    assert _reached(total, [x for x, _ in batches]) == (0 if good else 3)  # the oracle
    assert ("GG201" in codes(source)) is (not good)


MODULE_HELPER = """
import torch

def run_batch(model, x, y):
    {guard}
        out = model(x)
        err = ((out - y) ** 2).mean()
        return err, out.mean()
"""

MODULE_MAIN = """
import torch
from evalmod import run_batch

def validate(model, data):
    sum_loss = 0
    for x, y in data:
        loss, m = run_batch(model, x, y)
        sum_loss += loss
    return sum_loss
"""


@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_an_evaluation_total_of_another_files_function(tmp_path, monkeypatch, good):
    helper = MODULE_HELPER.format(guard="with torch.no_grad():" if good else "if True:")
    (tmp_path / "evalmod.py").write_text(textwrap.dedent(helper))
    (tmp_path / "main.py").write_text(textwrap.dedent(MODULE_MAIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "evalmod", raising=False)
    main = importlib.import_module("main")
    try:
        batches = _batches()
        total = main.validate(_model(), batches)
    finally:
        sys.modules.pop("main", None)
        sys.modules.pop("evalmod", None)
    assert _reached(total, [x for x, _ in batches]) == (0 if good else 3)  # the oracle
    found = [f.code for f in gg.lint_paths([str(tmp_path)]) if f.path.endswith("main.py")]
    assert ("GG201" in found) is (not good)


# --- unpacked inside the loop's own no_grad block -----------------------------------------------------------

UNPACK = """
import torch

def loss_and_accuracy(pred, y):
    loss = ((pred - y) ** 2).mean()
    return loss, (pred.sign() == y.sign()).double().mean()

def validate(model, batches, metric=loss_and_accuracy):
    sum_loss = 0
    sum_accuracy = 0
    for x, y in batches:
        with torch.no_grad():
            pred = model(x)
{unpack}
        sum_accuracy += accuracy
        sum_loss += loss
    return sum_loss
"""


@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_a_total_of_values_unpacked_under_no_grad(good):
    # the bad twin unpacks outside the block from a prediction computed with gradients on
    unpack = ("            loss, accuracy = metric(pred, y)" if good else
              "        pred = model(x)\n        loss, accuracy = metric(pred, y)")
    source = UNPACK.format(unpack=unpack)
    batches = _batches()
    total = _run(source, "validate", _model(), batches)
    assert _reached(total, [x for x, _ in batches]) == (0 if good else 3)
    assert ("GG201" in codes(source)) is (not good)


# --- a per-item total -------------------------------------------------------------------------------------

PER_ITEM = """
import torch

def forward_epoch(model, items, seen):
    {outer}
    for i in range(len(items)):
        model.zero_grad()
        x = items[i]
        {inner}
        count = 1
        while count <= x.shape[0]:
            loss_node = (model(x[count - 1:count]) ** 2).mean()
            loss += loss_node
            count += 1
        seen(loss)
    return 0
"""


def _per_item(good):
    return PER_ITEM.format(outer="" if good else "loss = 0", inner="loss = 0" if good else "pass")


@pytest.mark.parametrize("rename", [False, True], ids=["plain", "renamed"])
@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_a_per_item_total_bounded_by_its_reset(good, rename):
    source = _per_item(good)
    if rename:  # the eval-loop reading still needs a loss-like name on the total: renamed only the rest
        source = source.replace("count", "k").replace("items", "graphs").replace("x", "g")
    items = [x for x, _ in _batches()]
    kept = []
    _run(source, "forward_epoch", _model(), items, kept.append)
    # the oracle: what the last item's total still reaches (one item, or every item)
    assert _reached(kept[-1], items) == (1 if good else 3)
    assert ("GG201" in codes(source)) is (not good)


PER_EPOCH = """
import torch

def evaluate(model, loader, epochs, seen):
    for epoch in range(epochs):
        model.zero_grad()
        loss = 0
{inner}
        seen(loss)
    return 0
"""

OVER_LOADER = """\
        for x in loader:
            loss_batch = (model(x) ** 2).mean()
            loss += loss_batch"""

WHILE_FLAG = """\
        it = iter(loader)
        done = False
        while not done:
            x = next(it, None)
            if x is None:
                done = True
            else:
                loss_batch = (model(x) ** 2).mean()
                loss += loss_batch"""


@pytest.mark.parametrize("inner", [OVER_LOADER, WHILE_FLAG], ids=["for", "while"])
def test_negative_control_a_total_bound_per_epoch_over_the_loader_is_reported(inner):
    # bound afresh per epoch, but the loop inside runs over the whole loader: every batch's graph is kept
    source = PER_EPOCH.format(inner=inner)
    items = [x for x, _ in _batches()]
    kept = []
    _run(source, "evaluate", _model(), items, 1, kept.append)
    assert _reached(kept[-1], items) == 3
    assert "GG201" in codes(source)


# --- a meter that detaches what it is handed ----------------------------------------------------------------

METER = """
import torch

class EMAMetric:
    def __init__(self, gamma=0.9):
        self._val = 0.
        self._gamma = gamma

    def step(self, x):
        {cut}
        self._val = self._gamma * self._val + (1 - self._gamma) * x
        return self._val

def train(model, opt, batches):
    loss_metric = EMAMetric()
    for x, y in batches:
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        loss_metric.step(loss)
    return loss_metric._val
"""


@pytest.mark.parametrize("cut", ["x = x.detach().cpu().numpy() if torch.is_tensor(x) else x", "x = x.detach()",
                                 "x = x.to(torch.float64)"], ids=["is_tensor", "detach", "bad"])
def test_a_meter_that_detaches_what_it_is_handed(cut):
    source = METER.format(cut=cut)
    model = _model()
    batches = _batches()
    value = _run(source, "train", model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
    good = "detach" in cut  # the bad twin moves the tensor, graph and all
    assert _reached(value, [x for x, _ in batches]) == (0 if good else 3)
    assert ("GG201" in codes(source)) is (not good)


# --- the batches of a nested training loop ------------------------------------------------------------------

NESTED = """
import torch

def update(model, opt, states, returns, epochs):
    sum_returns = 0.0
    sum_loss = 0.0
    for _ in range(epochs):
        for state, ret in zip(states, returns):
            value = model(state)
            critic_loss = (ret - value).pow(2).mean()
            opt.zero_grad()
            critic_loss.backward()
            opt.step()
            sum_returns += ret.mean()
            {bad}
    return sum_returns, sum_loss
"""


@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_a_total_of_a_nested_loops_batches(good):
    source = NESTED.format(bad="pass" if good else "sum_loss += critic_loss")
    model = _model()
    batches = _batches(requires_grad=False)
    returns = [(y * 2).detach() for _, y in batches]
    states = [x.clone().requires_grad_(True) for x, _ in batches]
    rets, loss_total = _run(source, "update", model, torch.optim.SGD(model.parameters(), lr=0.1), states, returns, 2)
    assert _reached(rets, states) == 0 and rets.grad_fn is None
    assert _reached(loss_total, states) == (0 if good else 3)
    found = [f for f in gg.lint_source(textwrap.dedent(source)) if f.code == "GG201"]
    # the data total is never reported; the true loss total of the bad twin is
    assert not any("sum_returns" in f.message for f in found)
    assert bool(found) is (not good)


# --- GG202: a state set back between mini-batches; a new Parameter leaf ------------------------------------

RNN = """
import torch
import torch.nn as nn

class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn_hidden = None
        self.fc = nn.Linear(3, 4)
        self.rnn = nn.GRUCell(4, 4)

    def forward(self, x):
        x = torch.relu(self.fc(x))
        self.rnn_hidden = self.rnn(x, self.rnn_hidden)
        return self.rnn_hidden.sum(dim=-1)

class Agent:
    def __init__(self):
        torch.manual_seed(0)
        self.actor = Actor().double()
        self.opt = torch.optim.SGD(self.actor.parameters(), lr=0.01)

    def train(self, episodes):
        for episode in episodes:
            {reset}
            outs = [self.actor(obs) for obs in episode]
            loss = torch.stack(outs).pow(2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return True

def run(episodes):
    return Agent().train(episodes)
"""


@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_a_recurrent_state_set_back_before_each_mini_batch(good):
    source = RNN.format(reset="self.actor.rnn_hidden = None" if good else "pass")
    torch.manual_seed(2)
    episodes = [[torch.randn(2, 3, dtype=torch.float64) for _ in range(3)] for _ in range(2)]
    if good:
        assert _run(source, "run", episodes)
    else:  # the oracle: the second update back-propagates into the first's graph, already freed
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            _run(source, "run", episodes)
    assert ("GG202" in codes(source)) is (not good)


LEAF = """
import torch
import torch.nn as nn

class Memory(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.values = {init}

    def forward(self, x):
        new = self.lin(x).mean(dim=0, keepdim=True)
        self.values = {wrap}
        return self.values.sum()

def run(batches):
    torch.manual_seed(0)
    mem = Memory().double()
    for x in batches:
        mem(x)
    return mem.values
"""


@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_a_buffer_rewrapped_as_a_new_parameter_leaf(good):
    inner = "torch.vstack([self.values, new])"
    source = LEAF.format(wrap=f"nn.Parameter({inner}, requires_grad=True)" if good else inner,
                         init="nn.Parameter(torch.zeros(1, 3))" if good else "torch.zeros(1, 3)")
    batches = [x for x, _ in _batches(requires_grad=True)]
    kept = _run(source, "run", batches)
    assert _reached(kept, batches) == (0 if good else 3)
    assert ("GG202" in codes(source)) is (not good)


# --- GG108: an optimizer of the caller's choosing ------------------------------------------------------------

SECOND_ORDER = """
import torch

class HessianDiag(torch.optim.Optimizer):
    # differentiates .grad in step: it needs create_graph=True
    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                (h,) = torch.autograd.grad(p.grad.sum(), p, retain_graph=True)
                with torch.no_grad():
                    p -= group["lr"] * p.grad / (h.abs() + 1.0)
"""

STEPS = """
import torch

def execute_steps(func, initial_state, optimizer_class, num_iter=5):
    x = torch.tensor(initial_state, dtype=torch.float64).requires_grad_(True)
    optimizer = {build}
    for i in range(num_iter):
        optimizer.zero_grad()
        f = func(x)
        f.backward(create_graph=True, retain_graph=True)
        optimizer.step()
    return x.detach()
"""


@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_create_graph_for_an_optimizer_the_caller_chooses(good):
    source = STEPS.format(build="optimizer_class([x], lr=0.1)" if good else "torch.optim.SGD([x], lr=0.1)")
    scope: dict = {}
    exec(compile(textwrap.dedent(SECOND_ORDER), "<opt>", "exec"), scope)
    rosen = lambda t: (1 - t[0]) ** 2 + 100 * (t[1] - t[0] ** 2) ** 2  # noqa: E731
    if good:  # the oracle: the second-order step runs only with the graph in .grad
        out = _run(source, "execute_steps", rosen, [-1.0, 1.5], scope["HessianDiag"])
        assert torch.isfinite(out).all()
        plain = STEPS.format(build="optimizer_class([x], lr=0.1)").replace("create_graph=True, ", "")
        with pytest.raises(RuntimeError):
            _run(plain, "execute_steps", rosen, [-1.0, 1.5], scope["HessianDiag"])
    assert ("GG108" in codes(source)) is (not good)
