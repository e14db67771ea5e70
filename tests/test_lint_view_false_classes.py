"""GG101 / GG102 / GG103 false classes found on real code, decided from what the program computes.

Each class is a small program run in float64 where a number decides the truth (the weights a run
ends with, or whether a backward pass is left in ``.grad`` unapplied when the run ends), linted in
several forms (renamed objects, other bindings), next to a twin that is really wrong and stays
reported (the negative control). Every silent form here was reported by the linter before.

- a ``p.step()`` on an object bound by ``with torch.profiler.profile(...) as p`` (any name);
- an optimizer yielded by a ``@contextmanager`` of the file (``with inner(...) as (m, fast)``);
- an object handed the loss to back-propagate and then stepped (``optimizer.backward(loss)``);
- a function whose step waits on a window test or a flag its caller hands it (a micro-step helper);
- a clearing under ``if self.n == 0:`` after ``assert self.n == 0``;
- a clearing at the top of a nested loop that runs once (``range(ITERS)``, ``ITERS = 1``; a retry
  ``while`` that breaks after its first successful pass);
- a clearing after a call of the optimizer's own method that copies the gradients out;
- a window loop that never runs out of data (``cycle(loader)``, ``while True`` around it with its
  counter carried on) and ends right after a step.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from _findings import codes


def _run(source: str, entry: str = "main", **inject):
    namespace = dict(inject)
    exec(compile(textwrap.dedent(source), "<program>", "exec"), namespace)
    return namespace[entry]


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1).double()


def _data(n=5):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
            for _ in range(n)]


def _weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _rename(source: str, pairs) -> str:
    for old, new in pairs:
        source = re.sub(rf"\b{old}\b", new, source)
    return source


# --- GG101: a profiler is no optimizer -------------------------------------------------------------
PROFILED = """\
import torch


def main(model, data):
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=1)) as p:
        for x, y in data:
            ((model(x) - y) ** 2).mean().backward()
            p.step()
"""


@pytest.mark.parametrize("name", ["p", "prof", "opt", "optimizer", "o"])
def test_a_profiler_bound_by_with_is_no_optimizer_whatever_its_name(name):
    source = _rename(PROFILED, [("p", name)])
    model = _model()
    before = _weights(model)
    _run(source)(model, _data(3))
    assert torch.equal(_weights(model), before)  # the truth: nothing updates the weights
    assert "GG101" not in codes(source)


@pytest.mark.parametrize("binding", ["    p = make(model.parameters())\n    if True:\n", "    if True:\n"])
def test_negative_control_an_object_of_unknown_kind_stepped_after_backward_is_reported(binding):
    source = PROFILED.replace(
        "    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=1)) as p:\n", binding)
    if "make" not in binding:
        source = source.replace("def main(model, data):", "def main(model, data, p):")
    assert "GG101" in codes(source)


# --- GG101: an optimizer yielded by a context manager of the file -----------------------------------
YIELDED = """\
import contextlib

import torch


@contextlib.contextmanager
def inner_loop(model, lr):
    yield model, torch.optim.SGD(model.parameters(), lr=lr)


def main(model, data, optimizer):
    for x, y in data:
        optimizer.zero_grad()
        with inner_loop(model, 0.1) as (inner_model, inner_optimizer):
            ((inner_model(x) - y) ** 2).mean().backward()
            inner_optimizer.step()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()
"""
CLEARED = YIELDED.replace("        ((model(x) - y) ** 2).mean().backward()",
                          "        optimizer.zero_grad()\n        ((model(x) - y) ** 2).mean().backward()")


def _lines(source):
    import gradguard as gg

    return sorted((f.code, f.line) for f in gg.lint_source(source))


@pytest.mark.parametrize("name", ["fast", "o", "slow", "adapt"])
def test_an_optimizer_yielded_by_a_context_manager_is_one_whatever_its_name(name):
    bad, good = (_rename(s, [("inner_optimizer", name)]) for s in (YIELDED, CLEARED))
    runs = []
    for source in (bad, good):
        model = _model()
        _run(source)(model, _data(3), torch.optim.SGD(model.parameters(), lr=0.1))
        runs.append(_weights(model))
    assert not torch.allclose(*runs)  # the truth: the outer step applies the inner pass's gradient again
    assert "GG101" in codes(bad)
    # a rename changes no finding (before, `fast` lost the bad twin's GG101 and drew a GG102 on the good one)
    assert _lines(bad) == _lines(YIELDED)
    assert _lines(good) == _lines(CLEARED)


# --- GG101: an object that runs the backward pass itself --------------------------------------------
OWN_BACKWARD = """\
from zero import ZeroOptimizer


def main(model, data, optimizer):
    optimizer = ZeroOptimizer(optimizer, model)
    for x, y in data:
        loss = ((model(x) - y) ** 2).mean()
        optimizer.backward(loss)
        optimizer.step()
"""


class _ClearingWrapper:
    """What ColossalAI's ZeroDDP + ZeroOptimizer do: the wrapper owns the gradients and starts each
    backward pass from zero."""

    def __init__(self, optimizer, model):
        self.optimizer, self.model = optimizer, model

    def backward(self, loss):
        self.model.zero_grad(set_to_none=True)
        loss.backward()

    def step(self):
        self.optimizer.step()


class _ZeroModule:
    ZeroOptimizer = _ClearingWrapper


@pytest.mark.parametrize("name", ["optimizer", "engine", "zopt"])
def test_a_step_of_the_object_that_ran_the_backward_pass_is_not_reported(name):
    import sys

    source = _rename(OWN_BACKWARD, [("optimizer", name)])
    sys.modules["zero"] = _ZeroModule  # the wrapper's library, for the run only
    try:
        model = _model()
        _run(source)(model, _data(3), torch.optim.SGD(model.parameters(), lr=0.1))
    finally:
        del sys.modules["zero"]
    reference = _model()
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in _data(3):
        opt.zero_grad()
        ((reference(x) - y) ** 2).mean().backward()
        opt.step()
    assert torch.allclose(_weights(model), _weights(reference))  # the truth: each step applies its own pass
    assert "GG101" not in codes(source)


def test_negative_control_a_torch_optimizer_stepped_after_loss_backward_is_reported():
    source = OWN_BACKWARD.replace("optimizer.backward(loss)", "loss.backward()").replace(
        "    optimizer = ZeroOptimizer(optimizer, model)\n", "")
    assert "GG101" in codes(source)


# --- GG101: a micro-step helper is not one update ---------------------------------------------------
MICRO_STEP = """\
def scale_loss(engine, loss, loss_scaler, i, accum):
    loss /= accum
    loss_scaler(loss, engine.optimizer, parameters=engine.model.parameters(), update_grad=(i + 1) % accum == 0)
"""
FLAGGED = """\
def micro_step(model, optimizer, x, y, last):
    ((model(x) - y) ** 2).mean().backward()
    if last:
        optimizer.step()
"""
ONE_UPDATE = """\
def update(model, optimizer, x, y):
    ((model(x) - y) ** 2).mean().backward()
    optimizer.step()
"""


@pytest.mark.parametrize("source", [MICRO_STEP, FLAGGED, _rename(FLAGGED, [("last", "go"), ("optimizer", "o")])])
def test_a_function_whose_step_its_caller_picks_is_no_update(source):
    assert "GG101" not in codes(source)


def test_micro_step_helper_trains_right_under_a_caller_that_clears_per_window():
    step = _run(FLAGGED, "micro_step")
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = _data(4)
    for i, (x, y) in enumerate(data):
        if i % 2 == 0:
            opt.zero_grad()
        step(model, opt, x, y, last=i % 2 == 1)
    reference = _model()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for a, b in (data[:2], data[2:]):
        ref_opt.zero_grad()
        (((reference(a[0]) - a[1]) ** 2).mean() + ((reference(b[0]) - b[1]) ** 2).mean()).backward()
        ref_opt.step()
    assert torch.allclose(_weights(model), _weights(reference))


def test_negative_control_a_function_that_steps_on_every_call_is_one_update():
    assert "GG101" in codes(ONE_UPDATE)


# --- GG101: a clearing under a counter that an assert fixes -----------------------------------------
ASSERTED = """\
class Agent:
    def __init__(self, model, optimizer):
        self.model, self.optimizer, self.n_backward = model, optimizer, 0

    def accumulate_grad(self, x, y):
        if self.n_backward == 0:
            self.optimizer.zero_grad()
        ((self.model(x) - y) ** 2).mean().backward()
        self.n_backward += 1

    def batch_update(self, x, y):
        assert self.n_backward == 0
        self.accumulate_grad(x, y)
        self.optimizer.step()
        self.n_backward = 0
"""
# the same code with the count held at 1: the clearing never runs, every step re-applies the earlier passes
NEVER_CLEARED = ASSERTED.replace("self.optimizer, self.n_backward = model, optimizer, 0",
                                 "self.optimizer, self.n_backward = model, optimizer, 1").replace(
    "assert self.n_backward == 0", "assert self.n_backward == 1").replace("        self.n_backward = 0\n", "        self.n_backward = 1\n")


def _agent_weights(source):
    model = _model()
    agent = _run(source, "Agent")(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for x, y in _data(3):
        agent.batch_update(x, y)
    return _weights(model)


def test_a_clearing_under_a_count_the_assert_fixes_runs_on_every_update():
    reference = _model()
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in _data(3):
        opt.zero_grad()
        ((reference(x) - y) ** 2).mean().backward()
        opt.step()
    assert torch.allclose(_agent_weights(ASSERTED), _weights(reference))
    assert not torch.allclose(_agent_weights(NEVER_CLEARED), _weights(reference))
    for source in (ASSERTED, _rename(ASSERTED, [("n_backward", "k"), ("accumulate_grad", "fill"), ("Agent", "Learner")])):
        assert "GG101" not in codes(source)
    assert "GG101" in codes(NEVER_CLEARED)


# --- GG102: a nested loop that runs once ------------------------------------------------------------
RUN_ONCE = """\
ITERS = 1


def main(model, data, optimizer):
    for x, y in data:
        for i in range(ITERS):
            optimizer.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
        optimizer.step()
"""
RETRY = """\
def main(model, data, optimizer):
    for x, y in data:
        chunk = len(x)
        while chunk != 0:
            try:
                optimizer.zero_grad()
                for xs, ys in zip(x.split(chunk), y.split(chunk)):
                    ((model(xs) - ys) ** 2).sum().div(len(x)).backward()
            except RuntimeError:
                chunk //= 2
            else:
                break
        optimizer.step()
"""


def _plain_weights(n=3):
    reference = _model()
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in _data(n):
        opt.zero_grad()
        ((reference(x) - y) ** 2).mean().backward()
        opt.step()
    return _weights(reference)


@pytest.mark.parametrize("source", [RUN_ONCE, RUN_ONCE.replace("range(ITERS)", "range(1)"),
                                    _rename(RUN_ONCE, [("ITERS", "G"), ("optimizer", "o")]), RETRY,
                                    _rename(RETRY, [("chunk", "c"), ("optimizer", "o")])])
def test_a_clearing_in_a_loop_that_runs_once_discards_nothing(source):
    model = _model()
    _run(source)(model, _data(3), torch.optim.SGD(model.parameters(), lr=0.1))
    assert torch.allclose(_weights(model), _plain_weights())  # the truth: each pass reaches its step
    assert "GG102" not in codes(source)


@pytest.mark.parametrize("source", [RUN_ONCE.replace("ITERS = 1", "ITERS = 2"),
                                    RETRY.replace("            else:\n                break\n", "            chunk //= 2\n")])
def test_negative_control_a_loop_that_runs_twice_is_reported(source):
    assert "GG102" in codes(source)


# --- GG102: a call of the optimizer's own method that reads the gradients ---------------------------
STASHED = """\
from mylib import DOT


def main(model, data):
    optimizer = DOT(model.parameters(), lr=0.1)
    for x, y in data:
        out = model(x)
        optimizer.zero_grad()
        out.pow(2).mean().backward(retain_graph=True)
        optimizer.stash()
        optimizer.zero_grad()
        ((out - y) ** 2).mean().backward()
        optimizer.step()
"""


class _DOT(torch.optim.SGD):
    """mdistiller's DOT in short: ``stash()`` copies every gradient out, ``step()`` adds them back."""

    def stash(self):
        self.buf = [p.grad.clone() for g in self.param_groups for p in g["params"]]

    def step(self):
        for g in self.param_groups:
            for p, b in zip(g["params"], self.buf):
                p.grad.add_(b)
        super().step()


def _stashed_weights(source, method):
    cls = type("DOT", (_DOT,), {method: _DOT.stash}) if method != "stash" else _DOT
    source = source.replace("from mylib import DOT\n", "")
    model = _model()
    _run(source, DOT=cls)(model, _data(3))
    return _weights(model)


@pytest.mark.parametrize("method", ["stash", "collect", "keep_kd"])
def test_a_clearing_after_the_optimizer_copied_the_gradients_out_discards_nothing(method):
    source = STASHED.replace("stash", method)
    reference = _model()
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in _data(3):
        opt.zero_grad()
        out = reference(x)
        (out.pow(2).mean() + ((out - y) ** 2).mean()).backward()
        opt.step()
    assert torch.allclose(_stashed_weights(source, method), _weights(reference))  # both passes applied
    assert "GG102" not in codes(source)


def test_negative_control_without_the_copy_the_first_pass_is_lost_and_reported():
    source = STASHED.replace("        optimizer.stash()\n", "")
    assert "GG102" in codes(source)


# --- GG103: a loop that never runs out of data and ends right after a step --------------------------
CYCLED = """\
from itertools import cycle


def main(model, data, optimizer, accum, total):
    global_step = 0
    for step, (x, y) in enumerate(cycle(data)):
        (((model(x) - y) ** 2).mean() / accum).backward()
        if (step + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
            global_step += 1
        if global_step >= total:
            return
"""
FOREVER = CYCLED.replace("from itertools import cycle\n", """\
def cycle(loader):
    while True:
        for batch in loader:
            yield batch
""")
CARRIED = """\
def main(model, data, optimizer, accum, total):
    step = 0
    global_step = 0
    while True:
        for x, y in data:
            (((model(x) - y) ** 2).mean() / accum).backward()
            step += 1
            if step % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
                global_step += 1
                if global_step >= total:
                    break
        if global_step >= total:
            break
"""
# the run ends on a count of epochs, which changes when the data runs out, whatever the window holds
BY_EPOCHS = CARRIED.replace("    global_step = 0\n", "    global_step = 0\n    epoch = 0\n").replace(
    "                if global_step >= total:\n                    break\n", "").replace(
    "        if global_step >= total:\n            break\n", "        epoch += 1\n        if epoch >= total:\n            break\n")


def _left_unapplied(source, total) -> bool:
    """Whether a backward pass is left in ``.grad`` when the run ends (5 micro-batches, windows of 2)."""
    model = _model()
    _run(source)(model, _data(5), torch.optim.SGD(model.parameters(), lr=0.1), 2, total)
    return any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())


@pytest.mark.parametrize("source", [CYCLED, FOREVER, CYCLED.replace("from itertools import cycle", "import itertools").replace(
    "enumerate(cycle(data))", "enumerate(itertools.cycle(data))"), CARRIED,
    re.sub(r"(?<!\.)\bstep\b", "k", _rename(CARRIED, [("global_step", "n_updates"), ("optimizer", "o")]))])
def test_an_endless_window_loop_that_ends_after_a_step_leaves_nothing(source):
    assert not _left_unapplied(source, total=4)
    assert "GG103" not in codes(source)


@pytest.mark.parametrize("source", [CYCLED.replace("enumerate(cycle(data))", "enumerate(data)"), BY_EPOCHS,
                                    CARRIED.replace("    while True:\n", "    while True:\n        step = 0\n")])
def test_negative_control_a_run_that_can_end_on_a_partial_window_is_reported(source):
    total = 1 if source is BY_EPOCHS else 4
    if "enumerate(data)" in source:
        assert _left_unapplied(source, total=4)  # the data runs out after 5 passes, 1 of them unapplied
    elif source is BY_EPOCHS:
        assert _left_unapplied(source, total)
    assert "GG103" in codes(source)


# --- GG101: a step that a parameter compared with a constant picks ----------------------------------
PICKED = """\
import torch
from timm.utils import ApexScaler
from apex import amp


class SAMScaler(ApexScaler):
    def __call__(self, loss, optimizer, clip_grad=None, step=0, rho=0.05):
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        if step == 0 or step == 2:
            if clip_grad is not None:
                torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), clip_grad)
            optimizer.step()
        elif step == 1:
            torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), rho)
            optimizer.step()
"""


def test_a_step_picked_by_a_parameter_compared_with_constants_is_the_callers():
    for source in (PICKED, _rename(PICKED, [("step", "phase"), ("optimizer", "o"), ("SAMScaler", "Wrapper")])):
        assert "GG101" not in codes(source)


def test_negative_control_a_step_on_every_call_is_one_update():
    source = PICKED.replace("if step == 0 or step == 2:", "if True:").replace("elif step == 1:", "else:")
    assert "GG101" in codes(source)


# --- GG101: an optimizer built every iteration over a new detached leaf -----------------------------
GUIDED = """\
import torch


def main(model, latents, steps, lr):
    for t in range(steps):
        x_in = latents.detach().clone()
        x_in.requires_grad = True
        opt = torch.optim.SGD([x_in], lr=lr)
        model(x_in).pow(2).sum().backward()
        opt.step()
        latents = x_in.detach() * 0.9
    return latents
"""
# the leaf made once: every iteration's optimizer steps the gradients of all earlier passes too
ONE_LEAF = GUIDED.replace("    for t in range(steps):\n        x_in = latents.detach().clone()\n        x_in.requires_grad = True\n",
                          "    x_in = latents.detach().clone()\n    x_in.requires_grad = True\n    for t in range(steps):\n").replace(
    "        latents = x_in.detach() * 0.9\n    return latents\n", "    return x_in.detach()\n")


def test_an_optimizer_over_a_leaf_cut_afresh_each_iteration_steps_only_its_pass():
    model = _model()
    start = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    got = _run(GUIDED)(model, start, 3, 0.1)
    x = start
    for _ in range(3):  # the reference: one gradient step per iteration on the fresh leaf
        leaf = x.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(model(leaf).pow(2).sum(), leaf)
        x = (leaf - 0.1 * g).detach() * 0.9
    assert torch.allclose(got, x)
    for source in (GUIDED, _rename(GUIDED, [("x_in", "z"), ("opt", "inner")])):
        assert "GG101" not in codes(source)


def test_negative_control_one_leaf_for_the_whole_loop_is_reported():
    model = _model()
    start = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    got = _run(ONE_LEAF)(model, start, 3, 0.1)
    x = start.clone()
    for _ in range(3):  # the right update: one pass's gradient per step
        leaf = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(model(leaf).pow(2).sum(), leaf)
        x = (leaf - 0.1 * g).detach()
    assert not torch.allclose(got, x)  # the stale gradients moved the leaf elsewhere
    assert "GG101" in codes(ONE_LEAF)


# --- GG101: a learning-rate scheduler bound by its constructor is no optimizer ----------------------
SCHEDULED = """\
import torch
from torch.optim.lr_scheduler import ExponentialLR


def main(model, data, optimizer):
    transition_optim = ExponentialLR(optimizer, gamma=0.99)
    for x, y in data:
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()
        transition_optim.step()
"""


@pytest.mark.parametrize("form", ["from", "module"])
def test_a_scheduler_named_like_an_optimizer_is_no_optimizer(form):
    source = SCHEDULED if form == "from" else SCHEDULED.replace(
        "from torch.optim.lr_scheduler import ExponentialLR\n", "").replace("ExponentialLR(", "torch.optim.lr_scheduler.ExponentialLR(")
    model = _model()
    _run(source)(model, _data(3), torch.optim.SGD(model.parameters(), lr=0.1))
    assert torch.allclose(_weights(model), _plain_weights_decayed())  # the truth: one clean pass per step
    assert "GG101" not in codes(source)


def _plain_weights_decayed():
    reference = _model()
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.99)
    for x, y in _data(3):
        opt.zero_grad()
        ((reference(x) - y) ** 2).mean().backward()
        opt.step()
        sched.step()
    return _weights(reference)


def test_negative_control_a_second_optimizer_never_cleared_is_reported():
    source = SCHEDULED.replace("ExponentialLR(optimizer, gamma=0.99)", "torch.optim.SGD(model.parameters(), lr=0.1)")
    assert "GG101" in codes(source)


def test_negative_control_an_fp16_wrapper_of_the_optimizer_alone_is_still_reported():
    # apex's FP16_Optimizer back-propagates into the model's `.grad`, which the loop must clear
    source = OWN_BACKWARD.replace("from zero import ZeroOptimizer", "from apex.fp16_utils import FP16_Optimizer").replace(
        "ZeroOptimizer(optimizer, model)", "FP16_Optimizer(optimizer, static_loss_scale=128.0)")
    assert "GG101" in codes(source)
