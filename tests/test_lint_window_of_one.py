"""A clearing that a window of one never runs (simple-nmt: ``if iteration % iteration_per_update == 1:
zero_grad()`` with ``iteration_per_update = 1``, so no iteration clears and every step applies the sum of all
gradients so far), and its fix, which must draw no GG103: a window of one leaves no partial window.

The window size is spelled as a class attribute of a config object, a module constant and a method's
attribute. Oracle: each program runs 5 SGD steps in float64; the result is compared with plain PyTorch that
clears before every window of K micro-batches. A program the linter reports GG101 must differ from it; a
program it leaves alone must match it. Negative control: K = 2, where the same test does clear (odd
iterations) and the windows are right.
"""

import textwrap

import pytest
import torch

import gradguard as gg

PRELUDE = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1)).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(5)
data = [(torch.randn(8, 4, generator=g, dtype=torch.float64), torch.randn(8, 1, generator=g, dtype=torch.float64)) for _ in range(6)]
"""

# name -> (K, GG101 expected, program after the prelude)
PROGRAMS = {
    "class_config_never_clears": (1, True, """
class Config:
    per_update = 1

class State:
    iteration = 0

config, state = Config(), State()
for x, y in data:
    state.iteration += 1
    if state.iteration % config.per_update == 1:
        optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean() / config.per_update
    loss.backward()
    if state.iteration % config.per_update == 0:
        optimizer.step()
"""),
    "module_constant_in_a_function": (1, True, """
ACCUM = 1

def train(net, opt, batches):
    for it, (inp, tgt) in enumerate(batches, start=1):
        if (it % ACCUM) == 1:
            opt.zero_grad()
        ((net(inp) - tgt) ** 2).mean().backward()
        if it % ACCUM == 0:
            opt.step()

train(model, optimizer, data)
"""),
    "fixed_class_config": (1, False, """
class Config:
    per_update = 1

class State:
    iteration = 0

config, state = Config(), State()
for x, y in data:
    state.iteration += 1
    if state.iteration % config.per_update == 1 or config.per_update == 1:
        if state.iteration > 1:
            optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean() / config.per_update
    loss.backward()
    if state.iteration % config.per_update == 0:
        optimizer.step()
"""),
    "fixed_in_a_method": (1, False, """
class Trainer:
    def __init__(self, net, opt):
        self.net, self.opt = net, opt
        self.per_update = 1

    def fit(self, batches):
        for it, (inp, tgt) in enumerate(batches, start=1):
            if it % self.per_update == 1 or self.per_update == 1:
                self.opt.zero_grad()
            ((self.net(inp) - tgt) ** 2).mean().div(self.per_update).backward()
            if it % self.per_update == 0:
                self.opt.step()

Trainer(model, optimizer).fit(data)
"""),
    "window_of_two_clears": (2, False, """
class Config:
    per_update = 2

config = Config()
for it, (x, y) in enumerate(data, start=1):
    if it % config.per_update == 1:
        optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean() / config.per_update
    loss.backward()
    if it % config.per_update == 0:
        optimizer.step()
"""),
}


def _reference(k: int) -> list:
    """Plain PyTorch: clear, then the mean over each window of ``k`` micro-batches, one SGD step per window."""
    ns: dict = {}
    exec(PRELUDE, ns)
    model, data = ns["model"], ns["data"]
    for start in range(0, len(data) - len(data) % k, k):
        for p in model.parameters():
            p.grad = None
        sum(((model(x) - y) ** 2).mean() for x, y in data[start:start + k]).div(k).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    return [p.detach().clone() for p in model.parameters()]


def _run(body: str) -> list:
    ns: dict = {}
    exec(compile(PRELUDE + textwrap.dedent(body), "<window-of-one>", "exec"), ns)
    return [p.detach().clone() for p in ns["model"].parameters()]


def _gap(a, b) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def _lint(body: str) -> list:
    return [f.code for f in gg.lint_source(PRELUDE + textwrap.dedent(body), "train.py")]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_form_against_plain_windows(name):
    k, reported, body = PROGRAMS[name]
    gap = _gap(_run(body), _reference(k))
    codes = _lint(body)
    if reported:
        assert gap > 1e-3, f"{name}: never clearing must change the updates"
        assert "GG101" in codes and "GG103" not in codes, (name, codes)
    else:
        assert gap < 1e-10, f"{name}: a correct program must match the plain windows"
        assert codes == [], (name, codes)


def test_a_window_read_at_run_time_stays_open():
    # the same clearing test with the window size read from the command line: the file proves nothing
    body = """
import sys
per_update = int(sys.argv[1])
for it, (x, y) in enumerate(data, start=1):
    if it % per_update == 1:
        optimizer.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    if it % per_update == 0:
        optimizer.step()
"""
    assert "GG101" not in _lint(body)
