"""GG113 overscaled-window in the linter: decided from how the program is built, and the bad shapes
checked by running them against an independent reference.

The reference is plain PyTorch in float64: one SGD step on the mean loss of the window's K
micro-batches. The program the linter passes lands on it; the program it flags lands on a step
K times smaller (the negative control: the finding is about a real effect), on a real
``accelerate.Accelerator`` on the CPU and in a plain loop.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

K = 4

ACCELERATE = """\
from accelerate import Accelerator

accelerator = Accelerator(gradient_accumulation_steps=4)


def train(model, optimizer, data):
    model, optimizer = accelerator.prepare(model, optimizer)
    for x, y in data:
        with accelerator.accumulate(model):
            loss = ((model(x) - y) ** 2).mean()
            loss = loss / 4
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
"""
ACCELERATE_GOOD = ACCELERATE.replace("            loss = loss / 4\n", "")

PLAIN = """\
def compute(model, x, y, k):
    return ((model(x) - y) ** 2).mean() / k


def train(model, optimizer, data, k=4):
    assert len(data) % k == 0
    for i, (x, y) in enumerate(data):
        loss = compute(model, x, y, k)
        (loss / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
PLAIN_GOOD = PLAIN.replace("(loss / k).backward()", "loss.backward()")


def _gg113(source):
    return [c for c in codes(source) if c == "GG113"]


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(3, 5, generator=g, dtype=torch.float64), torch.randn(3, 2, generator=g, dtype=torch.float64)) for _ in range(K)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(5, 2).double()


def _run(source):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model = _model()
    namespace["train"](model, torch.optim.SGD(model.parameters(), lr=0.5), _data())
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _reference():
    model = _model()
    data = _data()
    x, y = torch.cat([d[0] for d in data]), torch.cat([d[1] for d in data])
    ((model(x) - y) ** 2).mean().backward()  # equal micro-batches: the window's mean loss
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.5 * p.grad
    return torch.cat([p.detach().flatten() for p in model.parameters()]), torch.cat([p.detach().flatten() for p in _model().parameters()])


@pytest.mark.parametrize("bad,good", [(PLAIN, PLAIN_GOOD), (ACCELERATE, ACCELERATE_GOOD)], ids=["plain", "accelerate"])
def test_flagged_programs_step_a_kth_of_the_mean_and_passed_ones_the_mean(bad, good):
    if bad is ACCELERATE:
        pytest.importorskip("accelerate")
    assert _gg113(bad) == ["GG113"] and _gg113(good) == []
    reference, start = _reference()
    assert torch.allclose(_run(good), reference, rtol=0, atol=1e-12)
    buggy = _run(bad)
    assert not torch.allclose(buggy, reference, atol=1e-6)  # the finding is about a real effect
    assert torch.allclose(buggy - start, (reference - start) / K, rtol=0, atol=1e-12)  # exactly 1/K of the step


REWRITES = [
    # renamed objects, the framework object named like nothing in particular, a literal in a constant
    ACCELERATE.replace("accelerator", "a"),
    ACCELERATE.replace("gradient_accumulation_steps=4", "gradient_accumulation_steps=STEPS").replace(
        "accelerator = ", "STEPS = 4\naccelerator = ").replace("loss / 4", "loss / STEPS"),
    ACCELERATE.replace("loss = loss / 4", "loss = loss / accelerator.gradient_accumulation_steps"),
    # the division inside a helper, unrelated code around it
    ACCELERATE.replace("            loss = ((model(x) - y) ** 2).mean()\n            loss = loss / 4\n",
                       "            loss = scaled(model, x, y, 4)\n            print('step')\n").replace(
        "def train", "def scaled(m, x, y, n):\n    return ((m(x) - y) ** 2).mean() / n\n\n\ndef train"),
    # in a method, the object an attribute
    textwrap.dedent("""\
    from accelerate import Accelerator


    class Run:
        def __init__(self, k):
            self.k = k
            self.engine_ = Accelerator(gradient_accumulation_steps=k)

        def fit(self, model, optimizer, data):
            for x, y in data:
                with self.engine_.accumulate(model):
                    self.engine_.backward(((model(x) - y) ** 2).mean() / self.k)
                    optimizer.step()
                    optimizer.zero_grad()
    """),
    PLAIN.replace("loss", "value").replace("compute", "helper_fn"),
    PLAIN.replace("(loss / k).backward()", "loss /= k\n        loss.backward()"),
    PLAIN.replace("        (loss / k).backward()\n", "        loss.backward()\n").replace(
        "            optimizer.step()", "            for p in model.parameters():\n                p.grad.div_(k)\n            optimizer.step()"),
]


@pytest.mark.parametrize("source", REWRITES, ids=range(len(REWRITES)))
def test_rewrites_that_keep_the_double_division_keep_the_finding(source):
    assert _gg113(source) == ["GG113"], source


CORRECT = [
    ACCELERATE.replace("Accelerator(gradient_accumulation_steps=4)", "Accelerator()"),  # the user's division alone
    ACCELERATE.replace("loss = loss / 4", "loss = loss / 2"),  # another factor: not a second window division
    ACCELERATE.replace("accelerator = Accelerator(gradient_accumulation_steps=4)",
                       "accelerator = Accelerator(gradient_accumulation_steps=4)\naccelerator = make()"),  # rebound: unknown
    PLAIN_GOOD,
    PLAIN.replace("(loss / k).backward()", "(loss / temperature).backward()").replace("k=4):", "k=4, temperature=2.0):"),
    PLAIN.replace("def compute(model, x, y, k):\n    return ((model(x) - y) ** 2).mean() / k",
                  "def compute(model, x, y, k):\n    return ((model(x) - y) ** 2).mean()"),
    # the gradients divided, the loss not: one division
    PLAIN_GOOD.replace("/ k\n", "\n", 1).replace("            optimizer.step()", "            for p in model.parameters():\n                p.grad /= k\n            optimizer.step()"),
]


@pytest.mark.parametrize("source", CORRECT, ids=range(len(CORRECT)))
def test_one_division_per_window_is_not_reported(source):
    assert _gg113(source) == [], source
