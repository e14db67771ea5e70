"""Lint GG106: a module whose parameters reach the backward pass while no optimizer built in the file holds them.

Each finding is checked against what the program does (the flagged program run in float64: the orphan never
moves and its ``.grad`` sums every step's gradient), and each silent shape beside a one-line change of it that
does fire, so that no negative control is silent by accident.
"""

import textwrap

import pytest
import torch

import gradguard as gg

SHARED_VAE = """
import torch
import torch.nn.functional as F


class SharedVAE(torch.nn.Module):
    def __init__(self, d=6, z=2):
        super().__init__()
        self.encoder = torch.nn.Linear(d, 2 * z)
        self.decoder = torch.nn.Linear(z, d)

    def forward(self, h):
        mu, logvar = self.encoder(h).chunk(2, -1)
        return self.decoder(mu + 0.1 * logvar), mu, logvar


torch.manual_seed(0)
shared = SharedVAE().double()
OPTIMIZER
for step in range(4):
    x = torch.randn(8, 6, dtype=torch.float64)
    optimizer.zero_grad()
    h, mu, logvar = shared(x)
    loss = F.mse_loss(h, x) + 0.1 * (mu.pow(2) + logvar.exp() - logvar).mean()
    loss.backward()
    optimizer.step()
"""
BAD_OPT = "optimizer = torch.optim.SGD(shared.encoder.parameters(), lr=0.1)"
GOOD_OPT = "optimizer = torch.optim.SGD(shared.parameters(), lr=0.1)"


def _lint(source: str):
    return [(f.code, f.line) for f in gg.lint_source(textwrap.dedent(source), "train.py", select="GG106")]


def _line_of(source: str, needle: str) -> int:
    return next(i for i, t in enumerate(textwrap.dedent(source).splitlines(), 1) if needle in t)


def test_a_part_left_out_is_reported_and_the_program_shows_it():
    bad = SHARED_VAE.replace("OPTIMIZER", BAD_OPT)
    assert _lint(bad) == [("GG106", _line_of(bad, BAD_OPT))]
    # the program in float64: the decoder never moves, and its .grad is the sum of every step's gradient
    scope: dict = {}
    exec(compile(bad, "train.py", "exec"), scope)
    shared = scope["shared"]
    torch.manual_seed(0)
    fresh = scope["SharedVAE"]().double()
    assert torch.equal(shared.decoder.weight, fresh.decoder.weight)
    assert not torch.equal(shared.encoder.weight, fresh.encoder.weight)
    assert shared.decoder.weight.grad is not None and shared.decoder.weight.grad.abs().sum() > 0


def test_the_fixed_program_is_silent_and_trains_the_part():
    good = SHARED_VAE.replace("OPTIMIZER", GOOD_OPT)
    assert _lint(good) == []
    scope: dict = {}
    exec(compile(good, "train.py", "exec"), scope)
    torch.manual_seed(0)
    fresh = scope["SharedVAE"]().double()
    assert not torch.equal(scope["shared"].decoder.weight, fresh.decoder.weight)


CLASS = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Linear(4, 4)
        FREEZE
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.base(x))


def train(loader):
    net = Net()
    opt = torch.optim.SGD(net.head.parameters(), lr=0.1)
    for x, y in loader:
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.parametrize("freeze", [
    "self.base.requires_grad_(False)",
    "for p in self.base.parameters(): p.requires_grad = False",
    "self.requires_grad_(False)",
])
def test_a_part_the_class_freezes_itself_is_silent(freeze):
    assert _lint(CLASS.replace("FREEZE", freeze)) == []
    # the same class without the freezing line: the base is reported
    assert [c for c, _ in _lint(CLASS.replace("FREEZE", "pass"))] == ["GG106"]


HANDED = """
import itertools
import torch
import torch.nn as nn
import torch.nn.functional as F


def train(body, loader, build):
    head = nn.Linear(8, 2)
    HANDOVER
    for x, y in loader:
        loss = F.cross_entropy(head(body(x)), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.parametrize("handover", [
    "opt = build(body, head)",  # a helper
    "opt = torch.optim.SGD(filter(lambda p: p.requires_grad, head.parameters()), lr=0.1)",
    "opt = torch.optim.SGD(itertools.chain(body.parameters(), head.parameters()), lr=0.1)",
    "opt = torch.optim.SGD([{'params': body.parameters()}, {'params': head.parameters(), 'lr': 0.01}], lr=0.1)",
    "params = [p for m in (body, head) for p in m.parameters()]; opt = torch.optim.SGD(params, lr=0.1)",
    "model = nn.Sequential(head); opt = torch.optim.SGD(model.parameters(), lr=0.1)",  # a containing module
    "opt = torch.optim.SGD(body.parameters(), lr=0.1); opt.add_param_group({'params': head.parameters()})",
    "head.requires_grad_(False); opt = torch.optim.SGD(body.parameters(), lr=0.1)",
])
def test_parameters_handed_on_are_silent(handover):
    assert _lint(HANDED.replace("HANDOVER", handover)) == []


def test_the_handed_on_shapes_fire_without_the_handover():
    # negative control of the one above: the head in no optimizer
    src = HANDED.replace("HANDOVER", "opt = torch.optim.SGD(body.parameters(), lr=0.1)")
    assert _lint(src) == [("GG106", _line_of(src, "opt = torch.optim.SGD"))]


@pytest.mark.parametrize("use", [
    "with torch.no_grad():\n        feats = head(x)\n    loss = feats.sum() + body(x).sum()",
    "loss = head(x).detach().sum() + body(x).sum()",
    "loss = body(x).sum()\n    print(head(x))",
])
def test_a_module_that_does_not_reach_the_backward_pass_is_silent(use):
    src = f"""
import torch
import torch.nn as nn


def train(body, x):
    head = nn.Linear(8, 2)
    opt = torch.optim.SGD(body.parameters(), lr=0.1)
    {use}
    loss.backward()
    opt.step()
"""
    assert _lint(src) == []
    reached = src.replace(use, "loss = head(x).sum() + body(x).sum()")
    assert [c for c, _ in _lint(reached)] == ["GG106"]


def test_no_optimizer_built_in_the_file_is_silent():
    # optimizers built where the linter does not read them (a framework's configure_optimizers)
    src = """
import torch
import torch.nn as nn


def train(body, x, trainer):
    head = nn.Linear(8, 2)
    loss = head(body(x)).sum()
    loss.backward()
    trainer.step()
"""
    assert _lint(src) == []


def test_names_do_not_decide():
    # the same programs with every name of the file's own renamed give the same verdicts
    bad = SHARED_VAE.replace("OPTIMIZER", BAD_OPT)
    renamed = (bad.replace("SharedVAE", "Blk").replace("shared", "m0").replace("encoder", "p1")
               .replace("decoder", "p2").replace("optimizer", "o"))
    assert [c for c, _ in _lint(renamed)] == ["GG106"]
    good = renamed.replace("torch.optim.SGD(m0.p1.parameters()", "torch.optim.SGD(m0.parameters()")
    assert _lint(good) == []
