"""GG113 on windows whose K is read from the step condition's structure, not only from ``% K``.

* a counter of micro-batches the loop grows and sets back, with the step under ``if c == K``;
* an inner loop over a slice of the data ``batches[s : s + K]`` (K from the slice's extent).

Each loss divided by K and the gradients divided by K again before the step: every window
applies 1/K of its mean (GG113). Each program runs in float64 and what its step applies is
compared with the window's mean gradient (the reference); the twin that divides once
applies exactly the mean and is silent (the negative control for the rule).
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

COUNTER = """\
import torch


def train(model, batches, K, seen):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    c = 0
    for x, y in batches:
        (((model(x) - y) ** 2).mean() / K).backward()
        c += 1
        if c == K:
            for p in model.parameters():
                p.grad /= K  # TWICE
            seen.append([p.grad.clone() for p in model.parameters()])
            opt.step()
            opt.zero_grad()
            c = 0
"""

SLICES = """\
import torch


class Fit:
    def __init__(self, net):
        self.net = net
        self.o = torch.optim.SGD(net.parameters(), lr=0.0)

    def run(self, data, size, seen):
        for start in range(0, len(data), size):
            part = data[start:start + size]
            self.o.zero_grad()
            for a, b in part:
                (((self.net(a) - b) ** 2).mean() / size).backward()
            for q in self.net.parameters():
                q.grad.div_(size)  # TWICE
            seen.append([q.grad.clone() for q in self.net.parameters()])
            self.o.step()


def train(model, batches, K, seen):
    Fit(model).run(batches, K, seen)
"""


def _once(source):
    return "\n".join(line for line in source.splitlines() if "# TWICE" not in line).replace(
        "for p in model.parameters():\n            seen", "seen").replace(
        "for q in self.net.parameters():\n            seen", "seen") + "\n"


def _applied(source):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).double()
    g = torch.Generator().manual_seed(4)
    batches = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64)) for _ in range(4)]
    seen = []
    namespace["train"](model, batches, 4, seen)
    model.zero_grad()
    (sum(((model(x) - y) ** 2).mean() for x, y in batches) / 4).backward()  # the window's mean loss
    return seen[0], [p.grad for p in model.parameters()]


@pytest.mark.parametrize("source", [COUNTER, SLICES], ids=["counter", "slices"])
def test_divided_twice_is_gg113(source):
    applied, mean = _applied(source)
    assert all(torch.allclose(a, m / 4, rtol=1e-9, atol=1e-12) for a, m in zip(applied, mean))
    assert "GG113" in codes(source)


@pytest.mark.parametrize("source", [COUNTER, SLICES], ids=["counter", "slices"])
def test_negative_control_divided_once_is_the_mean_and_silent(source):
    once = _once(source)
    assert "# TWICE" not in once and once != source
    applied, mean = _applied(once)
    assert all(torch.allclose(a, m, rtol=1e-9, atol=1e-12) for a, m in zip(applied, mean))
    assert "GG113" not in codes(once)


def test_renamed_keeps_the_verdict():
    renamed = COUNTER.replace("c ", "n_seen ").replace("c\n", "n_seen\n").replace("K", "acc").replace("opt", "sgd")
    assert "GG113" in codes(renamed)
    renamed = SLICES.replace("size", "w").replace("part", "chunk").replace("Fit", "Runner")
    assert "GG113" in codes(renamed)
