"""GG202 graph in buffer, both tools, one set of programs.

Each program defines a layer keeping a running statistic, in the shapes users write it
(a registered buffer rebound, an in-place ``mul_().add_()`` chain, a plain attribute set
from a helper function's tuple, a helper method, an augmented assignment, a parameter-made
statistic), and trains a small model with it. The oracle is plain PyTorch: the number of
autograd nodes reachable from the module's tensors, counted after 3 and after 6 steps. A
layer that chains its graphs must grow that count and draw GG202 from the watch and the
linter; the same layer fixed (``torch.no_grad()``, ``.detach()``, ``.item()``, ``.data``)
keeps no graph and draws nothing. An activation cached for one step, BatchNorm's own
statistics and a recurrent state cut by the class are the controls that hold a graph (or a
statistic) without chaining it.
"""

import textwrap
from collections import deque

import pytest
import torch

import gradguard as gg

LOOP = """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), Stat(8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(STEPS):
    x, y = torch.randn(5, 6), torch.randn(5, 1)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""

# name -> (chains its graph, the layer)
LAYERS = {
    "rebind": (True, """
class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n))

    def forward(self, x):
        self.mean = 0.9 * self.mean + 0.1 * x.mean(0)
        return x
"""),
    "rebind_no_grad": (False, """
class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n))

    def forward(self, x):
        with torch.no_grad():
            self.mean = 0.9 * self.mean + 0.1 * x.mean(0)
        return x
"""),
    "inplace_chain": (True, """
class Stat(torch.nn.Module):
    def __init__(self, n, momentum=0.1):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("running", torch.zeros(n))

    def forward(self, inputs):
        mean = inputs.mean(0)
        self.running.mul_(1 - self.momentum).add_(mean * self.momentum)
        return inputs
"""),
    "inplace_chain_detached": (False, """
class Stat(torch.nn.Module):
    def __init__(self, n, momentum=0.1):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("running", torch.zeros(n))

    def forward(self, inputs):
        mean = inputs.mean(0)
        self.running.mul_(1 - self.momentum).add_(mean.detach() * self.momentum)
        return inputs
"""),
    "function_returns_tuple": (True, """
def norm_stats(X, moving, momentum):
    mean = X.mean(dim=0)
    moving = momentum * moving + (1.0 - momentum) * mean
    return X - mean, moving

class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.moving = torch.zeros(n)

    def forward(self, X):
        Y, self.moving = norm_stats(X, self.moving, 0.9)
        return Y
"""),
    "function_returns_tuple_data": (False, """
def norm_stats(X, moving, momentum):
    mean = X.mean(dim=0)
    moving = momentum * moving + (1.0 - momentum) * mean
    return X - mean, moving.data

class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.moving = torch.zeros(n)

    def forward(self, X):
        Y, self.moving = norm_stats(X, self.moving, 0.9)
        return Y
"""),
    "helper_method": (True, """
class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("avg", torch.zeros(n))

    def _track(self, value):
        self.avg = self.avg * 0.99 + value * 0.01

    def forward(self, h):
        self._track(h.pow(2).mean(0))
        return h
"""),
    "helper_method_item": (False, """
class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.avg = 0.0

    def _track(self, value):
        self.avg = self.avg * 0.99 + value * 0.01

    def forward(self, h):
        self._track(h.pow(2).mean().item())
        return h
"""),
    "augmented": (True, """
class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("ema", torch.zeros(n))

    def forward(self, z):
        self.ema += 0.05 * (z.mean(0) - self.ema)
        return z
"""),
    "from_parameter": (True, """
class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(n))
        self.register_buffer("scale_avg", torch.zeros(n))

    def forward(self, z):
        self.scale_avg = 0.9 * self.scale_avg + 0.1 * self.scale
        return z * self.scale
"""),
    "cached_activation": (False, """
class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.last = None

    def forward(self, x):
        self.last = torch.tanh(x)
        return self.last
"""),
    "batchnorm_own_stats": (False, """
class Stat(torch.nn.BatchNorm1d):
    pass
"""),
    "state_cut_by_the_class": (False, """
class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("h", torch.zeros(n))

    def cut(self):
        self.h = self.h.detach()

    def forward(self, x):
        self.cut()
        self.h = 0.5 * self.h + x.mean(0)
        return x + self.h
"""),
}


def _graph_nodes(model) -> int:
    """Autograd nodes reachable from every tensor the model's modules keep (buffers and attributes)."""
    roots = [t.grad_fn for m in model.modules() for t in list(m._buffers.values()) + list(vars(m).values())
             if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter) and t.grad_fn is not None]
    seen, todo = set(), deque(roots)
    keep = []
    while todo:
        n = todo.popleft()
        if id(n) in seen:
            continue
        seen.add(id(n))
        keep.append(n)
        todo.extend(f for f, _ in n.next_functions if f is not None)
    return len(seen)


def _source(layer: str, steps: int) -> str:
    return "import torch\n" + textwrap.dedent(layer) + LOOP.replace("STEPS", str(steps))


def _run(layer: str, steps: int, watch: bool):
    ns: dict = {}
    if not watch:
        exec(compile(_source(layer, steps), "<gg202>", "exec"), ns)
        return None, ns["model"]
    with gg.watch(mode="record") as w:
        exec(compile(_source(layer, steps), "<gg202>", "exec"), ns)
    return [f.code for f in w.findings], ns["model"]


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_each_form_against_the_graph_it_keeps(name):
    chains, layer = LAYERS[name]
    at3 = _graph_nodes(_run(layer, 3, watch=False)[1])
    at6 = _graph_nodes(_run(layer, 6, watch=False)[1])
    if chains:
        assert at6 > at3 > 0, f"{name}: the kept graph should grow with the steps ({at3} -> {at6})"
    else:
        assert at6 == at3, f"{name}: a statistic kept without the chain must not grow ({at3} -> {at6})"
    codes, _ = _run(layer, 6, watch=True)
    assert ("GG202" in codes) is chains, (name, codes)
    assert ("GG202" in [f.code for f in gg.lint_source(_source(layer, 6), "train.py")]) is chains, name


def test_watch_reports_once_at_the_second_step():
    ns: dict = {}
    with gg.watch(mode="record") as w:
        exec(compile(_source(LAYERS["rebind"][1], 6), "<gg202>", "exec"), ns)
    found = [f for f in w.findings if f.code == "GG202"]
    assert [f.step for f in found] == [2]
    assert "Stat.mean" in found[0].message


def test_lint_names_the_line_of_the_update():
    source = _source(LAYERS["inplace_chain"][1], 2)
    lines = [f.line for f in gg.lint_source(source, "train.py") if f.code == "GG202"]
    assert [source.split("\n")[n - 1].strip() for n in lines] == [
        "self.running.mul_(1 - self.momentum).add_(mean * self.momentum)"]


def test_a_file_of_model_classes_alone_is_read():
    # The layer lives in models.py, the loop in train.py: the linter must read the models file by itself.
    source = "import torch\n" + textwrap.dedent(LAYERS["rebind"][1])
    assert "backward" not in source and "zero_grad" not in source
    assert [f.code for f in gg.lint_source(source, "models.py")] == ["GG202"]
    fixed = "import torch\n" + textwrap.dedent(LAYERS["rebind_no_grad"][1])
    assert [f.code for f in gg.lint_source(fixed, "models.py")] == []


DICT_LAYER = """
class Stat(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.outputs = dict()

    def forward(self, x):
        self.outputs["mean"] = UPDATE
        return x
"""


@pytest.mark.parametrize("update, chains", [
    ("x.mean(0)", False),  # the latest forward's value kept for logging: replaced every step
    ("0.9 * self.outputs['mean'] + 0.1 * x.mean(0) if 'mean' in self.outputs else x.mean(0)", True),
])
def test_an_entry_of_a_dict_attribute_is_replaced_not_written_into(update, chains):
    """`self.outputs[k] = value` on an attribute bound to a dict replaces one entry (one forward's
    graph, freed at the next), unlike an item write into a tensor buffer; it chains the graph only
    where the entry is built from its old value. Oracle: autograd nodes reachable from the dict's
    tensors after 3 and 6 steps. The linter follows the same line."""
    layer = DICT_LAYER.replace("UPDATE", update)

    def nodes(steps):
        ns: dict = {}
        exec(compile(_source(layer, steps), "<gg202>", "exec"), ns)
        roots = [t.grad_fn for t in ns["model"][1].outputs.values() if isinstance(t, torch.Tensor) and t.grad_fn]
        seen, todo = set(), deque(roots)
        while todo:
            n = todo.popleft()
            if id(n) not in seen:
                seen.add(id(n))
                todo.extend(f for f, _ in n.next_functions if f is not None)
        return len(seen)

    grows = nodes(6) > nodes(3)
    lint = "GG202" in [f.code for f in gg.lint_source(_source(layer, 6), "train.py")]
    assert grows is chains, (update, nodes(3), nodes(6))
    assert lint is chains, update
