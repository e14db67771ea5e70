"""GG104 in the linter when the micro-batch loop sits in a helper and the step in its caller, or when the
batch is cut into micro-batches by a strided range (``for i in range(0, n, m): batch[i : i + m]``).

Each program is run in float64 against an independent reference, one plain-PyTorch step on the whole
batch's mean loss: the correct twin (each micro-batch's mean weighted by its share of the batch) must
land on the reference, and the buggy program (plain means summed) must not, the negative control. The
linter must flag every buggy program and none of the twins, whatever the names and the form.
"""

from __future__ import annotations

import pytest
import torch

from _findings import codes

# guided-diffusion's form: a method runs the micro-batches, another one steps after calling it.
METHODS = """\
import torch


class Loop:
    def __init__(self, model, opt, microbatch):
        self.model, self.opt, self.microbatch = model, opt, microbatch

    def forward_backward(self, batch, target):
        self.opt.zero_grad()
        for i in range(0, batch.shape[0], self.microbatch):
            micro, y = batch[i : i + self.microbatch], target[i : i + self.microbatch]
            loss = ((self.model(micro) - y) ** 2).mean()
            # FIX: loss = loss * len(micro) / batch.shape[0]
            loss.backward()

    def run_step(self, batch, target):
        self.forward_backward(batch, target)
        self.opt.step()


def train(model, opt, batch, target):
    Loop(model, opt, 2).run_step(batch, target)
"""

# Functions of the module: the helper slices the batch, the caller steps.
FUNCTIONS = """\
import torch


def pass_over(net, xs, ys, width):
    for start in range(0, len(xs), width):
        piece = net(xs[start : start + width])
        err = torch.nn.functional.mse_loss(piece, ys[start : start + width])
        # FIX: err = err * piece.shape[0] / len(xs)
        err.backward()


def train(model, opt, batch, target):
    opt.zero_grad()
    pass_over(model, batch, target, 2)
    opt.step()
"""

# A range(K) micro-step loop in a helper method, the step in the method calling it.
RANGE_K = """\
import torch


class Trainer:
    def __init__(self, model, opt, k):
        self.model, self.opt, self.k = model, opt, k

    def micro_steps(self, batch, target):
        for xs, ys in zip(batch.chunk(self.k), target.chunk(self.k)):
            loss = ((self.model(xs) - ys) ** 2).mean()
            # FIX: loss = loss / self.k
            loss.backward()

    def update(self, batch, target):
        self.opt.zero_grad()
        self.micro_steps(batch, target)
        self.opt.step()


def train(model, opt, batch, target):
    Trainer(model, opt, 4).update(batch, target)
"""

PROGRAMS = {"methods": METHODS, "functions": FUNCTIONS, "range_k": RANGE_K}


def twin(source: str) -> str:
    return "\n".join(line.replace("# FIX: ", "") for line in source.split("\n"))


def _gg104(source):
    return [c for c in codes(source) if c == "GG104"]


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1)).double()
    g = torch.Generator().manual_seed(1)
    batch = torch.randn(8, 5, generator=g, dtype=torch.float64)
    target = torch.randn(8, 1, generator=g, dtype=torch.float64)
    return model, batch, target


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _run(source):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model, batch, target = _setup()
    namespace["train"](model, torch.optim.SGD(model.parameters(), lr=0.1), batch, target)
    return _params(model)


def _reference():
    """One plain step on the whole batch's mean loss."""
    model, batch, target = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ((model(batch) - target) ** 2).mean().backward()
    opt.step()
    return _params(model)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_sum_is_flagged_and_wrong_its_twin_is_silent_and_exact(name):
    source = PROGRAMS[name]
    assert _gg104(source) == ["GG104"]
    assert _gg104(twin(source)) == []
    reference = _reference()
    assert torch.allclose(_run(twin(source)), reference, rtol=0, atol=1e-12)
    assert not torch.allclose(_run(source), reference, atol=1e-4)  # negative control: the sum is too large


def _renamed(source):
    for old, new in (("forward_backward", "accumulate_micro"), ("run_step", "optimize"), ("microbatch", "mb"),
                     ("pass_over", "sweep"), ("width", "size"), ("micro_steps", "inner"), ("loss", "objective"),
                     ("self.opt", "self.optimizer_"), ("Loop", "DiffusionTrainer")):
        source = source.replace(old, new)
    return source


def _unrelated_code(source):
    """A log line after the helper's loop and an unrelated function: what runs is the same."""
    for backward in ("            loss.backward()\n", "        err.backward()\n"):
        if backward in source:
            indent = backward[: len(backward) - len(backward.lstrip())]
            source = source.replace(backward, backward + indent[:-4] + "seen = 1\n", 1)
    return source + "\n\ndef unrelated(v):\n    return v + 1\n"


@pytest.mark.parametrize("rewrite", [_renamed, _unrelated_code], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rewrites_that_keep_the_computation_keep_the_verdict(name, rewrite):
    source = rewrite(PROGRAMS[name])
    assert _gg104(source) == ["GG104"]
    assert _gg104(twin(source)) == []


def test_gradients_averaged_in_the_caller_are_a_scaled_window():
    """The caller divides ``.grad`` by the number of micro-batches before the step: correct, silent."""
    source = FUNCTIONS.replace("    pass_over(model, batch, target, 2)\n    opt.step()\n",
                               "    pass_over(model, batch, target, 2)\n    for p in model.parameters():\n"
                               "        p.grad /= len(batch) // 2\n    opt.step()\n")
    assert _gg104(source) == []
    assert torch.allclose(_run(source), _reference(), rtol=0, atol=1e-12)
