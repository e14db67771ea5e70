"""GG101: ``x.step()`` of an object whose class the file defines, and whose ``step`` can move no weight, is no
optimizer step.

A usage logger of the program (``step()`` appends a row) stepped in a pass that back-propagates to read
gradients (a saliency sum over batches, meant to add up) is not an optimizer: nothing reads ``.grad`` at its
step, and the program is run to show it: the weights and the scores are the same with the logger's steps
removed (the truth). The linter says nothing, whatever the object is called, however the file says what it is
(an annotated parameter, a local binding, an attribute). Negative control: a hand-written optimizer class of the
file whose ``step`` does ``p.data -= lr * p.grad``, stepped in a loop that never clears, is still reported: its
updates differ from its cleared twin's.
"""

from __future__ import annotations

import re
import textwrap

import torch

from _findings import codes

LOGGER = """\
from typing import Optional

import torch


class UsageLog:
    def __init__(self):
        self.rows = []
        self.count = 0

    def step(self):
        self.count += 1
        self.rows.append(self.count)


def saliency(model, loader, log: Optional['UsageLog'] = None):
    scores = []
    for x, y in loader:
        ((model(x) - y) ** 2).mean().backward()
        scores.append(sum(float(p.grad.abs().sum()) for p in model.parameters()))
        if log is not None:
            log.step()
    return scores


def run(model, loader):
    return saliency(model, loader, log=UsageLog())
"""

OPTIMIZER = """\
import torch


class PlainSGD:
    def __init__(self, params, lr):
        self.params, self.lr = list(params), lr

    def step(self):
        for p in self.params:
            p.data -= self.lr * p.grad


def run(model, loader):
    opt = PlainSGD(model.parameters(), lr=0.1)
    scores = []
    for x, y in loader:
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        scores.append(float(sum(p.abs().sum() for p in model.parameters())))
    return scores
"""
OPTIMIZER_CLEARED = OPTIMIZER.replace("        opt.step()\n", "        opt.step()\n        for p in model.parameters():\n            p.grad = None\n")


def _gg101(source):
    return [c for c in codes(source) if c == "GG101"]


def _run(source):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
            for _ in range(3)]
    scores = namespace["run"](model, data)
    return torch.tensor(scores, dtype=torch.float64), torch.cat([p.detach().flatten() for p in model.parameters()])


def _same(a, b):
    return all(torch.allclose(x, y) for x, y in zip(a, b))


def _renamed(source: str) -> str:
    """The logger called as an optimizer would be, its class and method bodies renamed."""
    for old, new in (("log", "optimizer"), ("UsageLog", "Meter"), ("rows", "history"), ("count", "n_calls"),
                     ("saliency", "attribution")):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def _bound_locally(source: str) -> str:
    """No annotation: the logger built in the function that steps it."""
    source = source.replace("def saliency(model, loader, log: Optional['UsageLog'] = None):\n    scores = []\n",
                            "def saliency(model, loader):\n    log = UsageLog()\n    scores = []\n")
    return source.replace("saliency(model, loader, log=UsageLog())", "saliency(model, loader)")


def _written_by_a_helper(source: str) -> str:
    """The logger's step writes through a method of its own."""
    return source.replace("    def step(self):\n        self.count += 1\n        self.rows.append(self.count)\n",
                          "    def _write(self):\n        self.rows.append(self.count)\n\n"
                          "    def step(self):\n        self.count += 1\n        self._write()\n")


def test_a_logger_step_moves_nothing_and_is_not_reported():
    without = LOGGER.replace("        if log is not None:\n            log.step()\n", "")
    assert without != LOGGER
    assert _same(_run(LOGGER), _run(without))
    assert _gg101(LOGGER) == []


def test_rewrites_of_the_logger_are_not_reported():
    for source in (_renamed(LOGGER), _bound_locally(LOGGER), _written_by_a_helper(LOGGER),
                   _renamed(_bound_locally(LOGGER))):
        assert source != LOGGER
        assert _same(_run(source), _run(LOGGER))
        assert _gg101(source) == [], source


def test_negative_control_a_hand_written_optimizer_of_the_file_is_still_a_step():
    assert not _same(_run(OPTIMIZER), _run(OPTIMIZER_CLEARED))
    assert _gg101(OPTIMIZER) == ["GG101"]
    assert _gg101(OPTIMIZER_CLEARED) == []
    renamed = re.sub(r"\bopt\b", "monitor", OPTIMIZER).replace("PlainSGD", "Tracker")
    assert _gg101(renamed) == ["GG101"]


def test_negative_control_a_logger_name_bound_to_an_optimizer_elsewhere_stays_an_optimizer():
    # the same name also bound to torch's SGD: the file does not say it is only the logger
    source = LOGGER.replace("def run(model, loader):\n",
                            "def train(model, loader):\n    log = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                            "    for x, y in loader:\n        ((model(x) - y) ** 2).mean().backward()\n        log.step()\n\n\n"
                            "def run(model, loader):\n")
    assert _gg101(source) != []


def test_negative_control_a_class_whose_step_runs_a_helper_of_the_file_that_updates_weights_is_a_step():
    # the class's own code reads no gradient; the file's function it calls does
    source = OPTIMIZER.replace("    def step(self):\n        for p in self.params:\n            p.data -= self.lr * p.grad\n",
                               "    def step(self):\n        sgd_update(self.params, self.lr)\n").replace(
        "class PlainSGD:", "def sgd_update(params, lr):\n    for p in params:\n        p.data -= lr * p.grad\n\n\nclass PlainSGD:")
    assert source != OPTIMIZER
    assert _same(_run(source), _run(OPTIMIZER))
    assert _gg101(source) == ["GG101"]
