"""Missed mutant classes of real trainers (eighth fresh set's held-out half, open for tuning), as small
programs run in float64 against a plain PyTorch reference, each with its renamed form and a negative control.

- A trainer class whose base is imported from the project (``from .base import BaseTrainer``) and whose
  name alone made it a framework's: a method holding its own loop over the batches, with the backward pass
  and the step in it, is the user's loop (GG104, GG102 read there like any raw loop).
- ``p.grad /= n`` right after ``all_reduce(p.grad)``: the mean over processes of a summed gradient, not a
  scaling of the window, so an undivided mean loss summed over K passes is still reported (GG104).
- A window test's path that skips a micro-batch before any backward pass (``if x is None: continue``) or
  ends the run (``raise``): the modulo windows stay where they are, the dropped last window is reported
  (GG103).
- ``loss, part = criterion(out, y)`` with the criterion's code not in view: ``part`` was computed with the
  loss, in the same pass; a total of it keeps graphs (GG201).
"""

from __future__ import annotations

import re
import textwrap
import types

import pytest
import torch

from _findings import codes

# --- a trainer class on a project base named like a framework's --------------------------------------------

TRAINER = """\
import torch
from .base_trainer import BaseTrainer


class PhysicsTrainer(BaseTrainer):
    def __init__(self, model, optimizer, criterion, accumulation_steps=1):
        super().__init__()
        self.model = model
        self.optimizer = optimizer
        self.criterion = criterion
        self.accumulation_steps = accumulation_steps

    def train_epoch(self, loader):
        for batch_idx, (inputs, targets) in enumerate(loader):
            outputs = self.model(inputs)
            loss = self.criterion(outputs, targets)
            loss = loss / self.accumulation_steps
            loss.backward()
            if (batch_idx + 1) % self.accumulation_steps == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
"""
UNDIVIDED = TRAINER.replace("            loss = loss / self.accumulation_steps\n", "")
CLEAR_AFTER = TRAINER.replace("            loss.backward()\n", "            loss.backward()\n            self.optimizer.zero_grad()\n").replace(
    "                self.optimizer.step()\n                self.optimizer.zero_grad()\n", "                self.optimizer.step()\n")


def _model() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2).double()


def _rename(source: str) -> str:
    for old, new in (("PhysicsTrainer", "Fitter"), ("BaseTrainer", "Trainer"), ("base_trainer", "core"),
                     ("train_epoch", "one_pass"), ("accumulation_steps", "k"), ("optimizer", "o"), ("criterion", "crit"),
                     ("loss", "obj"), ("outputs", "out"), ("inputs", "a"), ("targets", "b"), ("batch_idx", "j"),
                     ("loader", "data"), ("model", "net")):
        source = re.sub(rf"\b{re.escape(old)}\b", new, source)
    return source


def _run_trainer(source: str) -> list:
    """One pass over 8 rows in micro-batches of 2, windows of 2 (SGD, lr=1); the weights' change."""
    runnable = re.sub(r"^from \.\w+ import (\w+)$", r"class \1:\n    pass", source, flags=re.M)
    namespace: dict = {}
    exec(compile(textwrap.dedent(runnable), "<train>", "exec"), namespace)
    cls = next(v for k, v in namespace.items() if isinstance(v, type) and len(v.__mro__) > 2)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(8, 3, generator=g, dtype=torch.float64), torch.randn(8, 2, generator=g, dtype=torch.float64)
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = cls(model, torch.optim.SGD(model.parameters(), lr=1.0), torch.nn.MSELoss(), 2)
    getattr(trainer, next(k for k in vars(cls) if not k.startswith("_")))([(xs[i:i + 2], ys[i:i + 2]) for i in range(0, 8, 2)])
    return [b - p.detach() for b, p in zip(before, model.parameters())]


def _reference_windows() -> list:
    """Two steps, each applying the mean loss's gradient over its window of 4 rows, in float64."""
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(8, 3, generator=g, dtype=torch.float64), torch.randn(8, 2, generator=g, dtype=torch.float64)
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    for w in range(2):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs[4 * w:4 * w + 4]), ys[4 * w:4 * w + 4]).backward()
        opt.step()
    return [b - p.detach() for b, p in zip(before, model.parameters())]


def _same(a, b) -> bool:
    return all(torch.allclose(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("rename", [False, True])
def test_an_own_loop_of_a_class_on_a_project_base_named_like_a_framework_is_read(rename):
    form = _rename if rename else (lambda s: s)
    assert _same(_run_trainer(form(TRAINER)), _reference_windows())
    assert not _same(_run_trainer(form(UNDIVIDED)), _reference_windows())
    assert not _same(_run_trainer(form(CLEAR_AFTER)), _reference_windows())
    assert "GG104" in codes(form(UNDIVIDED))
    assert "GG102" in codes(form(CLEAR_AFTER))
    assert not {"GG102", "GG104"} & set(codes(form(TRAINER)))


def test_negative_control_a_framework_hook_of_such_a_class_stays_the_framework_s():
    # `training_step` is called by the framework once per batch: its loop is no loop over the batches
    hook = """\
import torch
from .base_trainer import BaseTrainer


class Module(BaseTrainer):
    def training_step(self, batch, batch_idx):
        loss = self.criterion(self.model(batch[0]), batch[1])
        loss.backward()
        for opt in self.optimizers:
            opt.step()
"""
    assert codes(hook) == []


# --- the mean over processes of an all-reduced gradient --------------------------------------------------------

REDUCED = """\
import torch


def average_gradients(model, dist):
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
            param.grad.data /= dist.get_world_size()


def train(model, opt, loader, k, dist):
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss = loss / k
        loss.backward()
        if (i + 1) % k == 0:
            average_gradients(model, dist)
            opt.step()
            opt.zero_grad()
"""
REDUCED_UNDIVIDED = REDUCED.replace("        loss = loss / k\n", "")
# the window scaled on its gradients instead (no all-reduce before the division): correct, and quiet
SCALED_ON_GRADIENTS = REDUCED_UNDIVIDED.replace("            dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)\n", "").replace(
    "param.grad.data /= dist.get_world_size()", "param.grad.data /= 2")


def _one_process():
    """``torch.distributed`` of a single process: the sum over processes is the gradient itself."""
    return types.SimpleNamespace(all_reduce=lambda t, op=None: None, get_world_size=lambda: 1,
                                 ReduceOp=types.SimpleNamespace(SUM="sum"))


def _run_reduced(source: str) -> list:
    namespace: dict = {}
    exec(compile(source, "<train>", "exec"), namespace)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(8, 3, generator=g, dtype=torch.float64), torch.randn(8, 2, generator=g, dtype=torch.float64)
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    namespace["train"](model, torch.optim.SGD(model.parameters(), lr=1.0), [(xs[i:i + 2], ys[i:i + 2]) for i in range(0, 8, 2)],
                       2, _one_process())
    return [b - p.detach() for b, p in zip(before, model.parameters())]


def _rename_reduced(source: str) -> str:
    for old, new in (("average_gradients", "sync"), ("param", "w"), ("model", "net"), ("opt", "o"), ("loss", "obj"),
                     ("loader", "data"), ("dist", "comm")):
        source = re.sub(rf"\b{re.escape(old)}\b", new, source)
    return source


@pytest.mark.parametrize("rename", [False, True])
def test_an_undivided_window_averaged_over_processes_is_reported(rename):
    form = _rename_reduced if rename else (lambda s: s)
    assert _same(_run_reduced(form(REDUCED)), _reference_windows())
    assert not _same(_run_reduced(form(REDUCED_UNDIVIDED)), _reference_windows())
    assert "GG104" in codes(form(REDUCED_UNDIVIDED))
    assert "GG104" not in codes(form(REDUCED))


def test_negative_control_a_window_scaled_on_its_gradients_stays_quiet():
    assert _same(_run_reduced(SCALED_ON_GRADIENTS), _reference_windows())
    assert "GG104" not in codes(SCALED_ON_GRADIENTS)


# --- a skipped micro-batch does not move the windows ------------------------------------------------------------

SKIPPING = """\
import torch


def train(model, opt, loader, k):
    opt.zero_grad()
    for i, batch in enumerate(loader):
        if batch is None:
            continue
        x, y = batch
        if torch.isnan(x).any():
            raise ValueError("NaN input")
        loss = torch.nn.functional.mse_loss(model(x), y) / k
        loss.backward()
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad()
"""
FLUSHED = SKIPPING + """\
    if (i + 1) % k != 0:
        opt.step()
        opt.zero_grad()
"""


def _run_skipping(source: str) -> list:
    """Six rows in micro-batches of 2, windows of 2: the last window is one micro-batch. Its weight is 1/2
    on a flush; the reference: windows of rows 0-3 and 4-5, each the mean of its micro-batches' mean
    losses divided by 2 (the program's own weights), so only a dropped last window differs."""
    namespace: dict = {}
    exec(compile(source, "<train>", "exec"), namespace)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, 2, generator=g, dtype=torch.float64)
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    namespace["train"](model, torch.optim.SGD(model.parameters(), lr=1.0), [(xs[i:i + 2], ys[i:i + 2]) for i in range(0, 6, 2)], 2)
    applied = [b - p.detach() for b, p in zip(before, model.parameters())]
    ref = _model()
    with torch.no_grad():
        for r, b in zip(ref.parameters(), before):
            r.copy_(b)
    opt = torch.optim.SGD(ref.parameters(), lr=1.0)
    for rows in ((0, 2), (2, 4)), ((4, 6),):
        opt.zero_grad()
        sum(torch.nn.functional.mse_loss(ref(xs[a:b]), ys[a:b]) / 2 for a, b in rows).backward()
        opt.step()
    return _same(applied, [b - p.detach() for b, p in zip(before, ref.parameters())])


@pytest.mark.parametrize("rename", [False, True])
def test_a_dropped_last_window_behind_a_skip_and_a_raise_is_reported(rename):
    form = (lambda s: re.sub(r"\bbatch\b", "item", re.sub(r"\bopt\b", "o", s))) if rename else (lambda s: s)
    assert not _run_skipping(form(SKIPPING))
    assert _run_skipping(form(FLUSHED))
    assert "GG103" in codes(form(SKIPPING))


def test_negative_control_the_flushed_last_window_stays_quiet():
    assert "GG103" not in codes(FLUSHED)


# --- parts of a loss handed back by a criterion whose code is not in view ----------------------------------------

PARTS = """\
def train(model, opt, loader, criterion):
    total, total_mel, total_gate = 0.0, 0.0, 0.0
    for x, y in loader:
        loss, mel_loss, gate_loss = criterion(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
        total_mel += mel_loss.item()
        total_gate += gate_loss.item()
    return total_mel
"""
PARTS_KEPT = PARTS.replace("total_mel += mel_loss.item()", "total_mel += mel_loss")
# an accuracy handed back beside the loss, never read as a tensor: nothing shows a graph
ACCURACY = """\
def train(model, opt, loader, criterion):
    total, total_acc = 0.0, 0.0
    for x, y in loader:
        loss, acc = criterion(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
        total_acc += acc
    return total_acc
"""


def _run_parts(source: str):
    namespace: dict = {}
    exec(compile(source, "<train>", "exec"), namespace)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, 2, generator=g, dtype=torch.float64)
    model = _model()

    def criterion(out, y):  # another file's loss object: the total and its terms, or an accuracy
        mel, gate = ((out - y) ** 2).mean(), out.abs().mean()
        return (mel + gate, mel, gate) if "gate_loss" in source else (mel + gate, float((out.argmax(1) == y.argmax(1)).double().mean()))

    return namespace["train"](model, torch.optim.SGD(model.parameters(), lr=0.1), [(xs[i:i + 2], ys[i:i + 2]) for i in range(0, 6, 2)],
                              criterion)


@pytest.mark.parametrize("rename", [False, True])
def test_a_total_of_a_loss_part_from_an_unseen_criterion_is_reported(rename):
    form = (lambda s: re.sub(r"\bmel_loss\b", "p", re.sub(r"\bcriterion\b", "f", s))) if rename else (lambda s: s)
    kept = _run_parts(form(PARTS_KEPT))
    assert isinstance(kept, torch.Tensor) and kept.grad_fn is not None  # the graphs of every batch, linked
    assert codes(form(PARTS_KEPT)).count("GG201") == 1


def test_negative_control_the_parts_read_as_numbers_stay_quiet():
    assert isinstance(_run_parts(PARTS), float)
    assert "GG201" not in codes(PARTS)
    assert isinstance(_run_parts(ACCURACY), float)  # a number beside the loss: no graph
    assert "GG201" not in codes(ACCURACY)


def test_negative_control_parts_a_method_of_the_file_hands_back_as_numbers():
    # the method's code is in view: its second element is a dict of Python floats, whatever it is called on
    source = """\
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def loss_with_diag(self, x, y):
        loss = ((self.lin(x) - y) ** 2).mean()
        return loss, {"mse": float(loss)}


def train(model, opt, loader):
    total, total_mse = 0.0, 0.0
    for x, y in loader:
        loss, diag = model.loss_with_diag(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
        total_mse += diag["mse"]
    return total_mse
"""
    namespace: dict = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model = namespace["Model"]().double()
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64)
    assert isinstance(namespace["train"](model, torch.optim.SGD(model.parameters(), lr=0.1), [(xs[:2], ys[:2]), (xs[2:], ys[2:])]), float)
    assert "GG201" not in codes(source)


# --- an exit on the loop's index at a limit not shown to be a whole number of windows ---------------------------

LIMITED = """\
import torch


def train(model, opt, loader, k, max_steps):
    for i, (x, y) in enumerate(loader):
        if i >= max_steps:
            break
        loss = torch.nn.functional.mse_loss(model(x), y) / k
        loss.backward()
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad()
"""
LIMITED_FLUSHED = LIMITED.replace("if (i + 1) % k == 0:", "if (i + 1) % k == 0 or i + 1 == max_steps:")
# the limit is a whole number of windows: the exit ends the loop on a window boundary (read as before)
LIMITED_ON_WINDOWS = LIMITED.replace("max_steps)", "n_windows)").replace("if i >= max_steps:", "if i >= n_windows * k:")


def _run_limited(source: str, limit: int, run: int) -> bool:
    """Eight rows in micro-batches of 2, windows of 2, the loop left after ``run`` micro-batches (3: a
    window and a half; ``limit`` is the program's argument). The reference steps every window of the micro-batches run, the last one short at
    its program weight 1/2."""
    namespace: dict = {}
    exec(compile(source, "<train>", "exec"), namespace)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(8, 3, generator=g, dtype=torch.float64), torch.randn(8, 2, generator=g, dtype=torch.float64)
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    namespace["train"](model, torch.optim.SGD(model.parameters(), lr=1.0), [(xs[i:i + 2], ys[i:i + 2]) for i in range(0, 8, 2)], 2, limit)
    applied = [b - p.detach() for b, p in zip(before, model.parameters())]
    ref = _model()
    opt = torch.optim.SGD(ref.parameters(), lr=1.0)
    batches = list(range(run))
    for w in range(0, run, 2):
        opt.zero_grad()
        sum(torch.nn.functional.mse_loss(ref(xs[2 * j:2 * j + 2]), ys[2 * j:2 * j + 2]) / 2 for j in batches[w:w + 2]).backward()
        opt.step()
    return _same(applied, [b - p.detach() for b, p in zip(before, ref.parameters())])


def test_an_exit_on_the_index_at_a_limit_off_the_windows_is_reported():
    assert not _run_limited(LIMITED, 3, 3)
    assert _run_limited(LIMITED_FLUSHED, 3, 3)
    assert "GG103" in codes(LIMITED)
    assert "GG103" in codes(LIMITED.replace("max_steps", "cap").replace("(i + 1)", "(j + 1)").replace("i >= ", "j >= ").replace(
        "for i, ", "for j, "))


def test_negative_control_an_exit_at_a_whole_number_of_windows_or_flushed():
    assert _run_limited(LIMITED_ON_WINDOWS, 2, 4)  # 2 windows of 2 micro-batches: the loop leaves after 4
    assert "GG103" not in codes(LIMITED_ON_WINDOWS)
    assert "GG103" not in codes(LIMITED_FLUSHED)
