"""GG104: a model whose ``forward`` returns a ``reduction="sum"`` loss, summed over micro-batches.

The shape of LLM speed-run scripts: a module of the file computes its loss summed over
its items; a micro-batch loop back-propagates ``model(x_i, y_i)`` and one step follows.
The window's gradient is then exactly the whole window's summed loss gradient: no
micro-batch is a mean that should have been divided. The linter used to read any
call of a module object as a mean loss; it now reads what the class's ``forward``
returns (the object's class from its bindings in the file, a parameter's from every
call site), so the verdict follows the reduction, not the call.

Each program runs in float64 and its window gradient is compared with one full-batch
pass of the same loss (the independent reference). Negative control: the same
programs with a mean-reduced ``forward`` are still reported, and their gradient is
K times the full-batch mean's.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

NET = """\
import torch
import torch.nn.functional as F


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, inputs, targets):
        out = self.lin(inputs)
        return F.mse_loss(out, targets, reduction="sum")
"""

MODULE_LEVEL = NET + """

torch.manual_seed(0)
model = Net().to(torch.float64)
opt = torch.optim.SGD(model.parameters(), lr=0.0)
mbs = 4
for step in range(1):
    assert len(xs) % mbs == 0
    for i in range(len(xs) // mbs):
        model(xs[i * mbs:(i + 1) * mbs], ys[i * mbs:(i + 1) * mbs]).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    opt.step()
    model.zero_grad(set_to_none=True)
"""

PARAMETER = NET + """

def train(net, o, data_x, data_y, size):
    for _ in range(1):
        for j in range(len(data_x) // size):
            part = slice(j * size, (j + 1) * size)
            val = net(data_x[part], data_y[part])
            val.backward()
        kept = [p.grad.clone() for p in net.parameters()]
        o.step()
        o.zero_grad()
    return kept


torch.manual_seed(0)
model = Net().double()
grads = train(model, torch.optim.SGD(model.parameters(), lr=0.0), xs, ys, 4)
"""

METHOD = NET + """

def unrelated(a, b):
    return F.l1_loss(a, b, reduction="none")


class Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.model = Net().double()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.0)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, 1)

    def fit(self, xs, ys, mb):
        for _ in range(1):
            for k in range(len(xs) // mb):
                lo, hi = k * mb, (k + 1) * mb
                self.model(xs[lo:hi], ys[lo:hi]).backward()
            self.kept = [p.grad.clone() for p in self.model.parameters()]
            self.opt.step()
            self.sched.step()
            self.opt.zero_grad()
        return self.kept


trainer = Trainer()
model = trainer.model
grads = trainer.fit(xs, ys, 4)
"""

HELPER = NET + """

def loss_of(m, a, b):
    return m(a, b)


torch.manual_seed(0)
network = Net().double()
optimizer = torch.optim.SGD(network.parameters(), lr=0.0)
for it in range(1):
    for i in range(len(xs) // 4):
        loss = loss_of(network, xs[4 * i:4 * i + 4], ys[4 * i:4 * i + 4])
        loss.backward()
    grads = [p.grad.clone() for p in network.parameters()]
    optimizer.step()
    optimizer.zero_grad()
model = network
"""

GOOD = {"module-level": MODULE_LEVEL, "parameter": PARAMETER, "method": METHOD, "helper": HELPER}
MEAN = 'return F.mse_loss(out, targets, reduction="sum")'


def _bad(source):
    return source.replace(MEAN, "return F.mse_loss(out, targets)")


def _gg104(source):
    return [c for c in codes(source) if c == "GG104"]


def _run(source):
    """(the window's gradients, the full batch's gradients of the same loss)."""
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(12, 3, generator=g, dtype=torch.float64), torch.randn(12, 2, generator=g, dtype=torch.float64)
    namespace = {"xs": xs, "ys": ys}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    model = namespace["model"]
    model.zero_grad()
    model(xs, ys).backward()  # one pass over the whole window, the loss the model defines
    return namespace["grads"], [p.grad for p in model.parameters()]


@pytest.mark.parametrize("form", sorted(GOOD))
def test_a_sum_reduced_forward_accumulated_over_the_window_is_not_reported(form):
    got, full = _run(GOOD[form])
    assert all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(got, full))
    assert _gg104(GOOD[form]) == []


def test_renamed_gives_the_same_verdict():
    renamed = MODULE_LEVEL.replace("model", "gpt").replace("Net", "Block").replace("mbs", "b")
    assert _gg104(renamed) == []
    assert _gg104(_bad(renamed)) == ["GG104"]


@pytest.mark.parametrize("form", sorted(GOOD))
def test_negative_control_a_mean_reduced_forward_is_still_reported(form):
    bad = _bad(GOOD[form])
    assert bad != GOOD[form]
    got, full = _run(bad)
    # each micro-batch is a mean: the window applies K = 3 times the full-batch mean's gradient
    assert all(torch.allclose(a, 3 * b, rtol=1e-12, atol=1e-12) for a, b in zip(got, full))
    assert _gg104(bad) == ["GG104"]


def test_a_model_bound_to_two_classes_is_not_followed():
    # `model` is built from one class or another: nothing tells which forward runs
    two = MODULE_LEVEL.replace(
        "model = Net().to(torch.float64)",
        "model = Net().to(torch.float64) if len(xs) else Other()",
    ).replace("class Net(", "class Other(torch.nn.Module):\n    def forward(self, a, b):\n        return (a - b).pow(2).mean()\n\n\nclass Net(")
    # an IfExp is no single class: the call is read as before (a module's mean loss)
    assert _gg104(two) == ["GG104"]
