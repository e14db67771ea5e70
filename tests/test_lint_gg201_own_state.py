"""GG201 for a loss tensor kept in an object's own state by a method the training loop runs on every step, and
for a window's total carried, graph and all, into a total that outlives the window.

Three shapes of published trainers:

* a meter whose method computes the loss parts, adds each into ``self.<total>`` and returns them for the
  caller to back-propagate (``parts = meter.compute(net(x), y)``; ``parts["part"].backward()``);
* a trainer whose per-batch method adds the loss into ``self.<epoch total>`` and hands it to a helper that
  back-propagates it (``self.optimize(loss)``), the total reset once per epoch;
* a window total set back when the window steps, added before that into an epoch total.

Each program is run in float64 with plain PyTorch and judged by how many batches' inputs the autograd graphs
held in what it keeps still reach (``_reached``): the bad program's state reaches every batch; each twin
(``.item()``, ``float(...)``, a reset on every step) reaches at most one. The linter must agree, also with
every user identifier renamed and with the loss computed in a helper function.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import gradguard as gg
from _findings import codes
from test_lint_gg201_graph_value import _reached

METER = """\
import torch
import torch.nn.functional as F


def part_of(pred, target):
    return F.mse_loss(pred, target)


class Meter:
    def __init__(self):
        self.total = 0.0
        self.count = 0

    def compute(self, pred, target):
        self.count += 1
        part = {part}
        self.total += {summed}
        parts = {{"part": part}}
        return parts


def run(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    meter = Meter()
    for x, y in batches:
        parts = meter.compute(net(x), y)
        opt.zero_grad()
        parts["part"].backward()
        opt.step()
    return meter
"""

TRAINER = """\
import torch
import torch.nn.functional as F


def part_of(pred, target):
    return F.mse_loss(pred, target)


class Trainer:
    def __init__(self, net):
        self.net = net
        self.opt = torch.optim.SGD(net.parameters(), lr=0.1)
        self.epoch_total = 0.0

    def start_epoch(self):
        self.epoch_total = 0.0

    def step(self, x, y):
        part = {part}
        self.epoch_total += {summed}
        self.optimize(part)

    def optimize(self, value):
        self.opt.zero_grad()
        value.backward()
        self.opt.step()

    def train(self, batches, epochs):
        for _ in range(epochs):
            self.start_epoch()
            for x, y in batches:
                self.step(x, y)
{per_step}

def run(net, batches):
    trainer = Trainer(net)
    trainer.train(batches, 2)
    return trainer
"""

WINDOW = """\
import torch
import torch.nn.functional as F


def run(net, batches):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    k = 2
    window = 0.0
    epoch = 0.0
    for i, (x, y) in enumerate(batches):
        part = F.mse_loss(net(x), y) / k
        part.backward()
        window += {summed}
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad()
            epoch += {carried}
            window = 0.0
    return epoch
"""

_INLINE = "F.mse_loss(pred, target)"
_TRAINER_INLINE = "F.mse_loss(self.net(x), y)"

_RENAMES = {"Meter": "Box", "compute": "tick", "total": "acc", "count": "seen", "part": "val", "parts": "out",
            "meter": "b", "Trainer": "Runner", "epoch_total": "run_sum", "start_epoch": "begin", "optimize": "apply",
            "value": "v", "trainer": "r", "window": "w", "epoch": "e", "part_of": "f", "opt": "o"}


def renamed(source: str) -> str:
    for old, new in sorted(_RENAMES.items(), key=lambda kv: -len(kv[0])):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def _batches(n=4):
    torch.manual_seed(0)
    return [(torch.randn(3, 5, dtype=torch.float64, requires_grad=True), torch.randn(3, 1, dtype=torch.float64))
            for _ in range(n)]


def _net():
    torch.manual_seed(1)
    return torch.nn.Linear(5, 1).double()


def _run(source: str) -> int:
    scope: dict = {}
    exec(compile(textwrap.dedent(source), "<program>", "exec"), scope)
    batches = _batches()
    kept = scope["run"](_net(), batches)
    return _reached(kept, [x for x, _ in batches])


def meter(summed: str, helper: bool) -> str:
    return METER.format(part="part_of(pred, target)" if helper else _INLINE, summed=summed)


def trainer(summed: str, helper: bool, per_step: str = "") -> str:
    part = "part_of(self.net(x), y)" if helper else _TRAINER_INLINE
    return TRAINER.format(part=part, summed=summed, per_step=per_step)


FORMS = [(h, r) for h in (False, True) for r in (False, True)]
_IDS = [f"{'helper' if h else 'inline'}-{'renamed' if r else 'plain'}" for h, r in FORMS]


def _form(source: str, rename: bool) -> str:
    return renamed(source) if rename else source


@pytest.mark.parametrize("form", FORMS, ids=_IDS)
def test_a_meter_method_adding_the_returned_loss_into_its_state_is_reported(form):
    helper, rename = form
    source = _form(meter("part", helper), rename)
    assert _run(source) == 4  # the oracle: the meter keeps every batch's graph
    found = [f for f in gg.lint_source(source) if f.code == "GG201"]
    assert len(found) == 1
    assert source.splitlines()[found[0].line - 1].strip().startswith("self.")  # the sum into the object's state


@pytest.mark.parametrize("form", FORMS, ids=_IDS)
@pytest.mark.parametrize("twin", ["part.item()", "float(part)", "part.detach()"])
def test_the_meter_twins_that_keep_no_graph_stay_silent(twin, form):
    helper, rename = form
    source = _form(meter(twin, helper), rename)
    assert _run(source) == 0
    assert "GG201" not in codes(source)


@pytest.mark.parametrize("form", FORMS, ids=_IDS)
def test_a_trainer_step_adding_the_loss_it_hands_to_a_backward_helper_is_reported(form):
    helper, rename = form
    source = _form(trainer("part", helper), rename)
    assert _run(source) == 4  # reset once per epoch: the last epoch's four batches stay linked
    assert codes(source).count("GG201") == 1


@pytest.mark.parametrize("form", FORMS, ids=_IDS)
def test_a_trainer_total_reset_on_every_step_or_cut_stays_silent(form):
    helper, rename = form
    per_step = _form(trainer("part", helper, per_step="                self.start_epoch()\n"), rename)
    assert _run(per_step) == 0  # set back after each step: nothing kept past the step
    assert "GG201" not in codes(per_step)
    cut = _form(trainer("part.item()", helper), rename)
    assert _run(cut) == 0
    assert "GG201" not in codes(cut)


@pytest.mark.parametrize("rename", [False, True], ids=["plain", "renamed"])
def test_a_window_total_carried_into_the_epoch_total_is_reported(rename):
    source = _form(WINDOW.format(summed="part", carried="window"), rename)
    assert _run(source) == 4  # both windows' graphs are linked into the epoch total
    assert "GG201" in codes(source)


@pytest.mark.parametrize("rename", [False, True], ids=["plain", "renamed"])
@pytest.mark.parametrize("carried", ["float(window)", "window.item()"])
def test_a_window_total_read_as_a_number_into_the_epoch_total_stays_silent(carried, rename):
    source = _form(WINDOW.format(summed="part", carried=carried), rename)
    assert _run(source) == 0
    assert "GG201" not in codes(source)


# ---------------------------------------------------------------------------------------------------------
# the mutation operator: a sum whose total is bound afresh just before it, with no loop between, holds one term

ROOT = Path(__file__).resolve().parent.parent


def _lint_recall():
    if "lint_recall" in sys.modules:
        return sys.modules["lint_recall"]
    spec = importlib.util.spec_from_file_location("lint_recall", ROOT / "benchmarks" / "lint_recall.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["lint_recall"] = module
    spec.loader.exec_module(module)
    return module


ONE_TERM = """\
import torch


def run(net, opt, tasks, crit):
    for x, y in tasks:
        for _ in range(2):
            opt.zero_grad()
            crit(net(x), y).backward()
            opt.step()
        total_loss = 0.0
        out = net(x)
        loss = crit(out, y)
        total_loss += loss.item() * len(y)
        print(total_loss)
"""


def _one_term_kept(source: str) -> int:
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    torch.manual_seed(0)
    net = torch.nn.Linear(5, 1).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    xs = [torch.randn(3, 5, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    tasks = [(x, torch.randn(3, 1, dtype=torch.float64)) for x in xs]
    kept = []
    scope["print"] = kept.append  # what the program keeps: each value of the total it prints
    scope["run"](net, opt, tasks, torch.nn.functional.mse_loss)
    return max(_reached(v, xs) for v in kept)


def test_the_operator_leaves_a_sum_of_one_term_per_binding_alone():
    lr = _lint_recall()
    mutated = ONE_TERM.replace("loss.item() * len(y)", "loss * len(y)")
    assert _one_term_kept(mutated) == 1  # one batch's graph at a time: no growing chain (no bug)
    assert not [m for m in lr.mutants("p.py", ONE_TERM) if m.operator == "loss-tensor-in-sum"]
    # bound once before the loop, the total grows over the tasks: the operator still mutates it
    grown = ONE_TERM.replace("        total_loss = 0.0\n", "").replace("    for x, y in tasks:\n", "    total_loss = 0.0\n    for x, y in tasks:\n")
    assert grown != ONE_TERM
    assert _one_term_kept(grown.replace("loss.item() * len(y)", "loss * len(y)")) == 3
    assert [m for m in lr.mutants("p.py", grown) if m.operator == "loss-tensor-in-sum"]
