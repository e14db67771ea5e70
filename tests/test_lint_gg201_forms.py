"""GG201 in the linter on a running sum of loss tensors written at a module's top level, into a dict of
tensors, or in a file whose docstring or comments mention a backward pass of the total.

Each buggy program is run: its running total must still hold an autograd graph at the end (the
mechanism: every step's nodes stay linked), and its correct twin's (``.item()``) must hold none, the
negative control. The linter must flag every buggy program and none of the twins, whatever the names
and wherever the loop sits (module, function, method).
"""

from __future__ import annotations

import pytest
import torch

from _findings import codes

# At the module's top level; the docstring says how the total is *not* used (text a search could misread).
MODULE_LEVEL = '''\
"""Training script: the total is only logged, we never call running.backward() on it."""
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
running = 0.0
for step in range(5):
    x = torch.randn(8, 4)
    optimizer.zero_grad()
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    loss.backward()
    optimizer.step()
    running += loss  # BUG
    # FIX: running += loss.item()
result = running
'''

# A dict of loss terms summed into a dict of totals, in a function.
DICT_IN_FUNCTION = '''\
import torch


def fit(model, optimizer, steps):
    totals = {"main": 0.0, "reg": 0.0}
    for _ in range(steps):
        x = torch.randn(8, 4)
        terms = {"main": ((model(x) - x.sum(1, keepdim=True)) ** 2).mean(), "reg": 0.01 * model.weight.pow(2).sum()}
        optimizer.zero_grad()
        (terms["main"] + terms["reg"]).backward()
        optimizer.step()
        for name in terms:
            totals[name] += terms[name]  # BUG
            # FIX: totals[name] += terms[name].item()
    return totals


model = torch.nn.Linear(4, 1)
result = fit(model, torch.optim.SGD(model.parameters(), lr=0.1), 5)
'''

# The same in a method, the dict's elements read through .items(), a comment naming a backward pass.
DICT_IN_METHOD = '''\
import torch


class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(4, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.log = {"mse": 0.0, "l2": 0.0}

    def run(self, steps):
        for _ in range(steps):
            x = torch.randn(8, 4)
            out = {"mse": ((self.model(x) - x.sum(1, keepdim=True)) ** 2).mean(), "l2": self.model.weight.pow(2).sum()}
            self.optimizer.zero_grad()
            out["mse"].backward()  # (self.log never reaches a backward() call)
            self.optimizer.step()
            self.log["mse"] = self.log["mse"] + out["mse"]  # BUG
            # FIX: self.log["mse"] = self.log["mse"] + out["mse"].item()
        return self.log


result = Trainer().run(5)
'''

PROGRAMS = {"module_level": MODULE_LEVEL, "dict_in_function": DICT_IN_FUNCTION, "dict_in_method": DICT_IN_METHOD}


def twin(source: str) -> str:
    """The correct twin: ``# BUG`` lines dropped, ``# FIX:`` lines uncommented."""
    out = []
    for line in source.split("\n"):
        if line.rstrip().endswith("# BUG"):
            continue
        out.append(line.replace("# FIX: ", ""))
    return "\n".join(out)


def _gg201(source):
    return [c for c in codes(source) if c == "GG201"]


def _kept_graphs(source) -> bool:
    """Whether the program's result still holds an autograd graph."""
    namespace = {"__name__": "program"}
    torch.manual_seed(0)
    exec(compile(source, "<program>", "exec"), namespace)
    result = namespace["result"]
    values = result.values() if isinstance(result, dict) else [result]
    return any(isinstance(v, torch.Tensor) and v.grad_fn is not None for v in values)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_total_keeps_graphs_and_is_flagged_its_twin_is_silent(name):
    source = PROGRAMS[name]
    assert _kept_graphs(source)  # the mechanism is real in this program
    assert not _kept_graphs(twin(source))  # negative control
    assert _gg201(source) == ["GG201"]
    assert _gg201(twin(source)) == []


def _renamed(source):
    for old, new in (("running", "acc_value"), ("totals", "sums"), ("terms", "pieces"), ("self.log", "self.history"),
                     ("out[", "parts["), ("out =", "parts ="), ("loss", "objective")):
        source = source.replace(old, new)
    return source


def _unrelated_code(source):
    return source.replace("import torch\n", "import torch\n\nLOG_EVERY = 10\n\n\ndef unrelated(v):\n    return v * 2\n", 1)


def _comment_mentions_backward(source):
    """A comment that names the total next to backward(): only code decides."""
    return source.replace("import torch\n", "import torch\n# note: total.backward() / running.backward() / log.backward() are never called\n", 1)


@pytest.mark.parametrize("rewrite", [_renamed, _unrelated_code, _comment_mentions_backward], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rewrites_that_keep_the_computation_keep_the_verdict(name, rewrite):
    source = rewrite(PROGRAMS[name])
    assert _gg201(source) == ["GG201"]
    assert _gg201(twin(source)) == []


def test_a_total_that_is_back_propagated_is_a_loss_not_a_log():
    """The code (not a comment) back-propagating the total keeps the rule silent: it is a loss."""
    source = MODULE_LEVEL.replace("result = running\n", "running.backward()\nresult = running\n")
    assert _gg201(source) == []


# A list that outlives the loop, appended a loss tensor each step (the history holds every step's nodes).
APPEND_MODULE = '''\
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
history = []
for step in range(5):
    x = torch.randn(8, 4)
    optimizer.zero_grad()
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    loss.backward()
    optimizer.step()
    history.append(loss)  # BUG
    # FIX: history.append(loss.item())
result = {i: v for i, v in enumerate(history)}
'''

APPEND_METHOD = '''\
import torch


class Fitter:
    def __init__(self):
        self.net = torch.nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.curve = []

    def objective(self, x):
        return ((self.net(x) - x.sum(1, keepdim=True)) ** 2).mean()

    def fit(self, steps):
        for _ in range(steps):
            x = torch.randn(8, 4)
            self.opt.zero_grad()
            value = self.objective(x)
            value.backward()
            self.opt.step()
            self.curve.append(value * 1.0)  # BUG
            # FIX: self.curve.append(value.detach() * 1.0)
        return {i: v for i, v in enumerate(self.curve)}


result = Fitter().fit(5)
'''

APPENDS = {"append_module": APPEND_MODULE, "append_method": APPEND_METHOD}


@pytest.mark.parametrize("name", sorted(APPENDS))
def test_a_history_of_loss_tensors_keeps_graphs_and_is_flagged(name):
    source = APPENDS[name]
    assert _kept_graphs(source) and not _kept_graphs(twin(source))
    assert _gg201(source) == ["GG201"]
    assert _gg201(twin(source)) == []
    for rewrite in (_renamed, _unrelated_code):
        assert _gg201(rewrite(source)) == ["GG201"]
        assert _gg201(twin(rewrite(source))) == []


def test_a_list_built_each_iteration_or_back_propagated_later_is_no_log():
    per_iteration = APPEND_MODULE.replace("    x = torch.randn(8, 4)\n", "    x = torch.randn(8, 4)\n    history = []\n", 1)
    assert _gg201(per_iteration) == []
    summed_later = APPEND_MODULE.replace("result = {", "torch.stack(history).sum().backward()\nresult = {")
    assert _gg201(summed_later) == []


# A meter object of the file that sums what it is handed: given the loss tensor, it keeps every step's graph.
METER_FUNCTION = '''\
import torch


class AverageMeter:
    def __init__(self):
        self.sum, self.count = 0.0, 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n


def fit(model, optimizer, steps):
    meter = AverageMeter()
    for _ in range(steps):
        x = torch.randn(8, 4)
        optimizer.zero_grad()
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        loss.backward()
        optimizer.step()
        meter.update(loss, x.size(0))  # BUG
        # FIX: meter.update(loss.item(), x.size(0))
    return {"sum": meter.sum}


model = torch.nn.Linear(4, 1)
result = fit(model, torch.optim.SGD(model.parameters(), lr=0.1), 5)
'''

METER_METHOD = '''\
import torch


class Sums:
    def __init__(self, n):
        self.totals = [0.0] * n

    def add(self, values):
        for i, v in enumerate(values):
            self.totals[i] += v


class Trainer:
    def __init__(self):
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
        self.opt = torch.optim.Adam(list(self.a.parameters()) + list(self.b.parameters()), lr=1e-3)
        self.logged = Sums(2)

    def run(self, steps):
        for _ in range(steps):
            x = torch.randn(8, 4)
            h = self.a(x)
            first, second = h.pow(2).mean(), (self.b(h) - 1).pow(2).mean()
            self.opt.zero_grad()
            (first + second).backward()
            self.opt.step()
            self.logged.add([first, second])  # BUG
            # FIX: self.logged.add([first.item(), second.item()])
        return dict(enumerate(self.logged.totals))


result = Trainer().run(5)
'''

METERS = {"meter_function": METER_FUNCTION, "meter_method": METER_METHOD}


@pytest.mark.parametrize("name", sorted(METERS))
def test_a_meter_handed_the_loss_tensor_keeps_graphs_and_is_flagged(name):
    source = METERS[name]
    assert _kept_graphs(source) and not _kept_graphs(twin(source))
    assert _gg201(source) == ["GG201"]
    assert _gg201(twin(source)) == []
    for rewrite in (_renamed, _unrelated_code):
        assert _gg201(rewrite(source)) == ["GG201"]
        assert _gg201(twin(rewrite(source))) == []


def test_a_meter_that_reads_a_number_itself_is_silent():
    source = METER_FUNCTION.replace("        self.sum += val * n\n", "        self.sum += val.item() * n\n")
    assert not _kept_graphs(source)
    assert _gg201(source) == []
