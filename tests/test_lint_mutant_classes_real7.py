"""Missed mutant classes of real trainers (seventh fresh set's held-out half, open for tuning), as
small programs run in float64 against the full batch's mean-loss gradient.

GG102: a clearing inside the micro-batch loop under an ``if`` that holds on any pass: a test of a
count the pass starts afresh (``n_rows = 0`` at the top of the pass, counted, then ``if n_rows > 0:``)
or of the item the loop hands out (``for part in parts:`` ... ``if part.numel() > 0:``). Every
micro-batch's gradient is wiped before the one step after the loop. A flag set before the loop
(``first = True`` ... ``if first: zero_grad(); first = False``) still picks the first pass only.

Each bad form applies a gradient other than the window's mean (checked by running it), each good
twin applies exactly the reference and draws nothing.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from _findings import codes

COUNTED = """\
import torch


class Trainer:
    def __init__(self, model, mb):
        self.model, self.mb = model, mb
        self.opt = torch.optim.SGD(model.parameters(), lr=1.0)

    def train(self, xs, ys):
        n = xs.shape[0]
        self.opt.zero_grad()
        for start in range(0, n, self.mb):
            batch_loss = 0.0
            n_rows = 0
            for j in range(start, min(start + self.mb, n)):
                batch_loss = batch_loss + ((self.model(xs[j]) - ys[j]) ** 2).sum()
                n_rows += 1
            if n_rows > 0:
                total = batch_loss / n
                total.backward()
                self.opt.zero_grad()
        self.opt.step()
"""

ITEM = """\
import torch


def train(model, opt, parts, n):
    opt.zero_grad()
    for xs, ys in parts:
        loss = ((model(xs) - ys) ** 2).sum(dim=1).sum() / n
        if xs.numel() > 0:
            opt.zero_grad()
            loss.backward()
    opt.step()
"""

GOOD_COUNTED = COUNTED.replace("                total.backward()\n                self.opt.zero_grad()\n",
                               "                total.backward()\n").replace(
    "        self.opt.step()\n", "        self.opt.step()\n        self.opt.zero_grad()\n")
GOOD_ITEM = ITEM.replace("            opt.zero_grad()\n            loss.backward()\n", "            loss.backward()\n").replace(
    "    opt.step()\n", "    opt.step()\n    opt.zero_grad()\n")
# the flag is set before the loop and dropped on the first pass: the clearing runs once, before any pass
FLAG_GOOD = ITEM.replace("    opt.zero_grad()\n    for xs, ys in parts:\n", "    first = True\n    for xs, ys in parts:\n").replace(
    "        if xs.numel() > 0:\n            opt.zero_grad()\n            loss.backward()\n",
    "        if first:\n            opt.zero_grad()\n            first = False\n        loss.backward()\n")


def _rename(source: str) -> str:
    for old, new in (("Trainer", "Runner"), ("self.opt", "self.o"), ("opt", "o"), ("n_rows", "cnt"), ("batch_loss", "acc"),
                     ("total", "objective"), ("loss", "obj"), ("model", "net"), ("xs", "a"), ("ys", "b"), ("parts", "chunks")):
        source = re.sub(rf"\b{re.escape(old)}\b", new, source)
    return source


BAD = {"counted": COUNTED, "item": ITEM, "counted-renamed": _rename(COUNTED), "item-renamed": _rename(ITEM),
       "counted-before-backward": COUNTED.replace("                total.backward()\n                self.opt.zero_grad()\n",
                                                  "                self.opt.zero_grad()\n                total.backward()\n")}
GOOD = {"counted": GOOD_COUNTED, "item": GOOD_ITEM, "first-pass-flag": FLAG_GOOD, "counted-renamed": _rename(GOOD_COUNTED)}


def _applied_matches_full_batch(source: str) -> bool:
    """One step of SGD(lr=1) over 10 rows in micro-batches of 4 (the last one short): the weights'
    change is the gradient the step applied; the reference is the gradient of the mean loss over the
    10 rows at once, in float64."""
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(10, 3, generator=g, dtype=torch.float64), torch.randn(10, 2, generator=g, dtype=torch.float64)
    model = torch.nn.Linear(3, 2).double()
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    cls = next((v for k, v in namespace.items() if isinstance(v, type) and k in ("Trainer", "Runner")), None)
    if cls is not None:
        cls(model, 4).train(xs, ys)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        namespace["train"](model, opt, [(xs[i:i + 4], ys[i:i + 4]) for i in range(0, 10, 4)], 10)
    applied = [b - p.detach() for b, p in zip(before, params)]
    reference = [p.detach().clone().requires_grad_(True) for p in before]
    out = xs @ reference[0].T + reference[1]
    ((out - ys) ** 2).sum(dim=1).mean().backward()
    return all(torch.allclose(a, r.grad) for a, r in zip(applied, reference))


def _gg102(source):
    return [c for c in codes(source) if c == "GG102"]


@pytest.mark.parametrize("form", sorted(BAD))
def test_a_clearing_under_a_test_that_holds_on_any_pass_is_reported(form):
    assert not _applied_matches_full_batch(BAD[form])
    assert _gg102(BAD[form]) == ["GG102"]


@pytest.mark.parametrize("form", sorted(GOOD))
def test_negative_control_a_clearing_after_the_step_or_before_the_first_pass(form):
    assert _applied_matches_full_batch(GOOD[form])
    assert _gg102(GOOD[form]) == []


# GG104: the loss is computed in the arms of one `if` on a flag fixed for the run and back-propagated
# in the arms of a second `if` on the same flag; the run takes the same arm in both, so the arm that
# forgot the division back-propagates an undivided mean whatever the other arm divides.
TWO_ARMS = """\
import torch


def train(model, opt, parts, k, split):
    opt.zero_grad()
    for i, (x, y) in enumerate(parts):
        if split:
            halves = [((model(h) - t) ** 2).sum(dim=1) for h, t in zip(x.chunk(2), y.chunk(2))]
            loss = torch.cat(halves).mean()
        else:
            loss = ((model(x) - y) ** 2).sum(dim=1).mean()
            loss = loss / k
        if split:
            loss.backward(retain_graph=False)
        else:
            loss.backward()
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad()
"""
TWO_ARMS_GOOD = TWO_ARMS.replace("            loss = torch.cat(halves).mean()\n",
                                 "            loss = torch.cat(halves).mean() / k\n")
TWO_ARMS_RENAMED = _rename(TWO_ARMS).replace("split", "halved").replace("halves", "pieces")


def _two_arms_applied(source: str, split: bool) -> bool:
    """One window of 3 micro-batches of 4 rows, SGD(lr=1), float64: the applied gradient against the
    mean loss over the 12 rows at once."""
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    xs, ys = torch.randn(12, 3, generator=g, dtype=torch.float64), torch.randn(12, 2, generator=g, dtype=torch.float64)
    model = torch.nn.Linear(3, 2).double()
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    namespace["train"](model, torch.optim.SGD(params, lr=1.0), [(xs[i:i + 4], ys[i:i + 4]) for i in range(0, 12, 4)], 3, split)
    applied = [b - p.detach() for b, p in zip(before, params)]
    reference = [p.detach().clone().requires_grad_(True) for p in before]
    (((xs @ reference[0].T + reference[1]) - ys) ** 2).sum(dim=1).mean().backward()
    return all(torch.allclose(a, r.grad) for a, r in zip(applied, reference))


@pytest.mark.parametrize("source", [TWO_ARMS, TWO_ARMS_RENAMED], ids=["plain", "renamed"])
def test_an_undivided_arm_of_a_run_flag_is_reported(source):
    assert _two_arms_applied(source, split=False)
    assert not _two_arms_applied(source, split=True)
    assert [c for c in codes(source) if c == "GG104"] == ["GG104"]


def test_negative_control_both_arms_divided():
    assert _two_arms_applied(TWO_ARMS_GOOD, split=True) and _two_arms_applied(TWO_ARMS_GOOD, split=False)
    assert [c for c in codes(TWO_ARMS_GOOD) if c == "GG104"] == []


# GG101: a method that is one update per call (nnU-Net's `run_iteration(data, do_backprop=True)`) with its
# backward pass and its step under the same test of a parameter: every call that back-propagates also
# steps (the optimizer is handed in, built elsewhere), so the parameter picks no micro-step of a caller's window; without a clearing each step applies
# every earlier call's gradient again. A step alone under the parameter (`if update_grad:`, the backward
# pass outside) is still a micro-step whose window the caller runs, and is not reported.
PER_CALL = """\
import torch


class Trainer:
    def __init__(self, network, optimizer):
        self.network, self.optimizer = network, optimizer

    def run_iteration(self, x, y, do_backprop=True):
        self.optimizer.zero_grad()
        out = self.network(x)
        loss = ((out - y) ** 2).sum(dim=1).mean()
        if do_backprop:
            loss.backward()
            self.optimizer.step()
        return loss.item()
"""
PER_CALL_BAD = PER_CALL.replace("        self.optimizer.zero_grad()\n", "")
PER_CALL_RENAMED = _rename(PER_CALL_BAD).replace("run_iteration", "one_pass").replace("do_backprop", "train_now")
PER_CALL_MICRO = PER_CALL_BAD.replace(
    "        if do_backprop:\n            loss.backward()\n            self.optimizer.step()\n",
    "        loss.backward()\n        if do_backprop:\n            self.optimizer.step()\n            self.optimizer.zero_grad()\n")


def _per_call_matches_sgd(source: str) -> bool:
    """Three calls with SGD(lr=0.1), float64, against plain SGD on the same three batches."""
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64))
               for _ in range(3)]
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2).double()
    ref = torch.nn.Linear(3, 2).double()
    ref.load_state_dict(net.state_dict())
    trainer = next(v for k, v in namespace.items() if isinstance(v, type) and k in ("Trainer", "Runner"))(
        net, torch.optim.SGD(net.parameters(), lr=0.1))
    method = getattr(trainer, "run_iteration", None) or getattr(trainer, "one_pass")
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for x, y in batches:
        method(x, y)
        opt.zero_grad()
        ((ref(x) - y) ** 2).sum(dim=1).mean().backward()
        opt.step()
    return all(torch.allclose(a, b) for a, b in zip(net.parameters(), ref.parameters()))


@pytest.mark.parametrize("source", [PER_CALL_BAD, PER_CALL_RENAMED], ids=["plain", "renamed"])
def test_one_update_per_call_under_a_parameter_test_without_a_clearing_is_reported(source):
    assert not _per_call_matches_sgd(source)
    assert [c for c in codes(source) if c == "GG101"] == ["GG101"]


@pytest.mark.parametrize("source", [PER_CALL, PER_CALL_MICRO], ids=["cleared", "caller-picks-the-step"])
def test_negative_control_cleared_or_a_micro_step_the_caller_picks(source):
    if source is PER_CALL:
        assert _per_call_matches_sgd(source)
    assert [c for c in codes(source) if c == "GG101"] == []
