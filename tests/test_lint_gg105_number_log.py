"""GG105: a Python number divided by the step counter for the log is not the window's division.

``tr_loss += loss.item()`` makes ``tr_loss`` a Python float; ``loss = tr_loss / (step + 1)`` after the
step only feeds the log (the next iteration binds ``loss`` from the model before its backward pass).
A number carries no graph, so no backward pass differentiates it. Each program is run in float64:
the truth is whether the weights it ends with equal plain SGD on each window's mean gradient. The
negative control divides the back-propagated loss by the running counter (1, 1/2, ... weights): the
weights differ from the reference and GG105 is still reported. Forms: renamed (no name says "loss"),
the log value computed by a helper, the loop in a method, ``float(loss)`` instead of ``.item()``.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from _findings import codes

LOGGED = """\
import torch


def train(model, data, optimizer, accumulate, log):
    tr_loss = 0.0
    optimizer.zero_grad()
    for step, (x, y) in enumerate(data):
        loss = ((model(x) - y) ** 2).mean()
        loss = loss / accumulate
        loss.backward()
        tr_loss += loss.item()
        if (step + 1) % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
            loss = tr_loss / (step + 1)
            log(loss)
"""
# the back-propagated loss divided by the running micro-step: weights 1, 1/2, 1/3, ...
LOGGED_BAD = LOGGED.replace("        loss = loss / accumulate\n", "        loss = loss / (step % accumulate + 1)\n")

HELPER = LOGGED.replace("            loss = tr_loss / (step + 1)\n", "            loss = mean_so_far(tr_loss, step + 1)\n").replace(
    "import torch\n", "import torch\n\n\ndef mean_so_far(total, count):\n    return total / count\n", 1)

METHOD = """\
import torch


class Runner:
    def __init__(self, model, optimizer, accumulate, log):
        self.model, self.optimizer, self.accumulate, self.log = model, optimizer, accumulate, log

    def fit(self, data):
        tr_loss = 0.0
        self.optimizer.zero_grad()
        for step, (x, y) in enumerate(data):
            loss = ((self.model(x) - y) ** 2).mean() / self.accumulate
            loss.backward()
            tr_loss += float(loss)
            if (step + 1) % self.accumulate == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
                loss = tr_loss / (step + 1)
                self.log(loss)


def train(model, data, optimizer, accumulate, log):
    Runner(model, optimizer, accumulate, log).fit(data)
"""
METHOD_BAD = METHOD.replace("loss = ((self.model(x) - y) ** 2).mean() / self.accumulate",
                            "loss = ((self.model(x) - y) ** 2).mean() / (step % self.accumulate + 1)")

GOOD = {"logged": LOGGED, "helper": HELPER, "method": METHOD}
BAD = {"logged": LOGGED_BAD, "helper": LOGGED_BAD, "method": METHOD_BAD}

K = 2


def _weights(source):
    """Run the program in float64 on 4 batches (2 windows); its final weights."""
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    model, data = _setup()
    logged = []
    namespace["train"](model, data, torch.optim.SGD(model.parameters(), lr=0.1), K, logged.append)
    assert logged and all(isinstance(v, float) for v in logged)  # the log saw numbers
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
            for _ in range(4)]
    return model, data


def _reference():
    """Plain SGD on each window's full-batch mean gradient."""
    model, data = _setup()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for w in range(0, len(data), K):
        x = torch.cat([b[0] for b in data[w:w + K]])
        y = torch.cat([b[1] for b in data[w:w + K]])
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _gg105(source):
    return [c for c in codes(source) if c == "GG105"]


def _rename(source: str) -> str:
    for old, new in (("tr_loss", "running"), ("loss", "objective"), ("optimizer", "opt"), ("model", "net"),
                     ("step", "k"), ("Runner", "Fitter"), ("mean_so_far", "avg")):
        source = re.sub(rf"(?<!\.)\b{old}\b", new, source)  # `opt.step()` keeps its method
    return source


@pytest.mark.parametrize("form", sorted(GOOD))
def test_a_logged_number_over_the_counter_is_not_reported(form):
    assert torch.allclose(_weights(GOOD[form]), _reference(), rtol=0, atol=1e-12)
    assert _gg105(GOOD[form]) == []


@pytest.mark.parametrize("form", sorted(GOOD))
def test_negative_control_the_loss_divided_by_the_counter_is_still_reported(form):
    assert not torch.allclose(_weights(BAD[form]), _reference(), rtol=0, atol=1e-6)
    assert _gg105(BAD[form]) == ["GG105"]


@pytest.mark.parametrize("form", sorted(GOOD))
def test_renamed_programs_keep_their_verdicts(form):
    good, bad = _rename(GOOD[form]), _rename(BAD[form])
    assert "loss" not in good and "loss" not in bad
    assert torch.allclose(_weights(good), _reference(), rtol=0, atol=1e-12)
    assert _gg105(good) == []
    assert _gg105(bad) == ["GG105"]
