"""Missed mutant classes of real trainers (sixth fresh set's held-out half, open for tuning), as
small programs run in float64 against the full batch's mean-loss gradient.

GG102: a clearing in one arm of a configuration test (``if self.scaler is not None and
self.scaler.is_enabled(): scaler.scale(loss).backward() else: loss.backward(); opt.zero_grad()``),
the step under ``(i + 1) % K == 0`` taking the same arm: the arm is the run's configuration on the
stepping micro-batch as on the others, so the clearing wipes every micro-batch but the last.

GG104: the window's loss unpacked from a method that either hands on the model's own tuple
(``return self.net(x, y)``) or builds one (``return out, loss, None``): the i-th element of each
return is read, so the undivided mean summed over K micro-batches is seen.

Each bad form applies a gradient other than the window's mean (checked by running it), each
good twin applies exactly the reference and draws nothing.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

SCALER_ARM = """\
import torch


class Trainer:
    def __init__(self, model, k, scaler=None):
        self.model, self.k, self.scaler = model, k, scaler
        self.optimizer = torch.optim.SGD(model.parameters(), lr=1.0)

    def train(self, xs, ys):
        size = xs.shape[0] // self.k
        for i in range(self.k):
            part = slice(i * size, (i + 1) * size)
            loss = ((self.model(xs[part]) - ys[part]) ** 2).sum(dim=1).mean() / self.k
            if self.scaler is not None and self.scaler.is_enabled():
                self.scaler.scale(loss).backward()
            else:
                loss.backward()
                self.optimizer.zero_grad()
            if (i + 1) % self.k == 0:
                if self.scaler is not None and self.scaler.is_enabled():
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    self.optimizer.step()
"""

ARM_CLEAR = "                loss.backward()\n                self.optimizer.zero_grad()\n"
GG102_BAD = {
    "after-backward": SCALER_ARM,
    "before-backward": SCALER_ARM.replace(ARM_CLEAR, "                self.optimizer.zero_grad()\n                loss.backward()\n"),
    "renamed": SCALER_ARM.replace("Trainer", "Runner").replace("self.optimizer", "self.o").replace("self.scaler", "self.amp")
                         .replace("self.k", "self.n").replace("loss", "objective").replace("part", "sl"),
}
GG102_GOOD = {
    # the clearing after the window's step
    "after-step": SCALER_ARM.replace(ARM_CLEAR, "                loss.backward()\n").replace(
        "                    self.optimizer.step()\n",
        "                    self.optimizer.step()\n                self.optimizer.zero_grad()\n"),
    # a bad micro-batch is dropped and its iteration skips the step: no stepping path takes that branch
    "skip-non-finite": SCALER_ARM.replace(ARM_CLEAR, "                loss.backward()\n").replace(
        "            if self.scaler is not None and self.scaler.is_enabled():\n                self.scaler.scale",
        "            if not torch.isfinite(loss):\n                self.optimizer.zero_grad()\n                continue\n"
        "            if self.scaler is not None and self.scaler.is_enabled():\n                self.scaler.scale").replace(
        "                    self.optimizer.step()\n",
        "                    self.optimizer.step()\n                self.optimizer.zero_grad()\n"),
}

TUPLE_METHOD = """\
import torch


class Trainer:
    def __init__(self, net, k, plain):
        self.net, self.k, self.plain = net, k, plain
        self.optimizer = torch.optim.SGD(net.parameters(), lr=1.0)

    def _forward(self, x, y):
        if not self.plain:
            return self.net(x, y)
        out, loss = self.net(x, y)
        return out, loss, None

    def train(self, xs, ys):
        size = xs.shape[0] // self.k
        for i in range(self.k):
            part = slice(i * size, (i + 1) * size)
            _, loss, _ = self._forward(xs[part], ys[part])
            loss.backward()
            if (i + 1) % self.k == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
"""

TUPLE_HELPER = """\
import torch


def run_forward(net, x, y, plain):
    if not plain:
        return net(x, y)
    out, loss = net(x, y)
    return out, loss, None


class Trainer:
    def __init__(self, net, k, plain):
        self.net, self.k, self.plain = net, k, plain
        self.optimizer = torch.optim.SGD(net.parameters(), lr=1.0)

    def train(self, xs, ys):
        size = xs.shape[0] // self.k
        for i in range(self.k):
            part = slice(i * size, (i + 1) * size)
            _, loss, _ = run_forward(self.net, xs[part], ys[part], self.plain)
            loss.backward()
            if (i + 1) % self.k == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
"""

GG104_BAD = {
    "method": TUPLE_METHOD,
    "helper": TUPLE_HELPER,
    "renamed": TUPLE_METHOD.replace("_forward", "fwd").replace("loss", "obj").replace("self.k", "self.m")
                           .replace("self.optimizer", "self.o").replace("Trainer", "Loop"),
}
GG104_GOOD = {
    "method": TUPLE_METHOD.replace("            loss.backward()", "            (loss / self.k).backward()"),
    "helper": TUPLE_HELPER.replace("            loss.backward()", "            (loss / self.k).backward()"),
}


class _Net(torch.nn.Module):
    """A model of another module (not in the linted file) returning ``(output, mean loss)``."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(3, 2).double()

    def forward(self, x, y):
        out = self.inner(x)
        return out, ((out - y) ** 2).sum(dim=1).mean(), None


class _PairNet(_Net):
    def forward(self, x, y):
        return super().forward(x, y)[:2]


def _applied_matches_full_batch(source: str, make) -> bool:
    """Run one window of 3 micro-batches with SGD(lr=1): the weights' change is the gradient the
    step applied; the reference is the gradient of the mean loss over the 12 rows at once."""
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(12, 3, generator=g, dtype=torch.float64), torch.randn(12, 2, generator=g, dtype=torch.float64)
    trainer, params = make(namespace)
    before = [p.detach().clone() for p in params]
    trainer.train(xs, ys)
    applied = [b - p.detach() for b, p in zip(before, params)]
    reference = [p.detach().clone().requires_grad_(True) for p in before]
    out = xs @ reference[0].T + reference[1]
    ((out - ys) ** 2).sum(dim=1).mean().backward()
    return all(torch.allclose(a, r.grad) for a, r in zip(applied, reference))


def _scaler_trainer(namespace):
    model = torch.nn.Linear(3, 2).double()
    trainer_class = next(v for k, v in namespace.items() if isinstance(v, type) and k in ("Trainer", "Runner"))
    return trainer_class(model, 3, None), list(model.parameters())


def _tuple_trainer(plain):
    def make(namespace):
        net = _PairNet() if plain else _Net()
        trainer_class = next(v for k, v in namespace.items() if isinstance(v, type) and k in ("Trainer", "Loop"))
        return trainer_class(net, 3, plain), list(net.inner.parameters())
    return make


def _only(source, code):
    return [c for c in codes(source) if c == code]


@pytest.mark.parametrize("form", sorted(GG102_BAD))
def test_a_clearing_in_the_configuration_arm_of_every_micro_batch_is_reported(form):
    assert not _applied_matches_full_batch(GG102_BAD[form], _scaler_trainer)
    assert _only(GG102_BAD[form], "GG102") == ["GG102"]


@pytest.mark.parametrize("form", sorted(GG102_GOOD))
def test_negative_control_a_clearing_after_the_step_or_on_a_skipped_iteration(form):
    assert _applied_matches_full_batch(GG102_GOOD[form], _scaler_trainer)
    assert _only(GG102_GOOD[form], "GG102") == []


@pytest.mark.parametrize("form", sorted(GG104_BAD))
@pytest.mark.parametrize("plain", [False, True])
def test_an_undivided_loss_unpacked_from_a_method_handing_on_the_models_tuple_is_reported(form, plain):
    assert not _applied_matches_full_batch(GG104_BAD[form], _tuple_trainer(plain))
    assert _only(GG104_BAD[form], "GG104") == ["GG104"]


@pytest.mark.parametrize("form", sorted(GG104_GOOD))
@pytest.mark.parametrize("plain", [False, True])
def test_negative_control_the_divided_twin_is_the_window_mean_and_not_reported(form, plain):
    assert _applied_matches_full_batch(GG104_GOOD[form], _tuple_trainer(plain))
    assert _only(GG104_GOOD[form], "GG104") == []


# GG101: no clearing, the step under the same run-wide flag as the backward (`if scaler is not None:`
# twice), and a checkpoint every N iterations handed the optimizer (unknown code that may clear it
# on those iterations only): every other iteration steps the sum of all earlier gradients.
NO_CLEAR = """\
import torch
from checkpoints import save_checkpoint


def train(model, optimizer, batches, scaler=None, every=100):
    for step, (x, y) in enumerate(batches):
        loss = ((model(x) - y) ** 2).sum(dim=1).mean()
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        if (step + 1) % every == 0:
            save_checkpoint("last.pt", model, optimizer)
"""
GG101_BAD = {
    "plain": NO_CLEAR,
    "renamed": NO_CLEAR.replace("optimizer", "o").replace("step", "it").replace("model", "net")
                       .replace("o.it()", "o.step()").replace("scaler.it(o)", "scaler.step(o)"),
}
GG101_GOOD = {
    "cleared": NO_CLEAR.replace("        loss = ((", "        optimizer.zero_grad()\n        loss = (("),
    "cleared-after-step": NO_CLEAR.replace("            optimizer.step()\n",
                                           "            optimizer.step()\n        optimizer.zero_grad()\n"),
}


def _trains_like_the_reference(source: str) -> bool:
    """Four SGD steps (lr 0.1) over four batches in float64, against a loop that takes each step's
    gradient afresh with ``torch.autograd.grad``."""
    namespace: dict = {}
    runnable = source.replace("from checkpoints import save_checkpoint", "save_checkpoint = lambda *args: None")
    exec(compile(runnable, "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).double()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64))
               for _ in range(4)]
    weights = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    for x, y in batches:
        grads = torch.autograd.grad(((x @ weights[0].T + weights[1] - y) ** 2).sum(dim=1).mean(), weights)
        weights = [(w - 0.1 * gr).detach().requires_grad_(True) for w, gr in zip(weights, grads)]
    namespace["train"](model, torch.optim.SGD(model.parameters(), lr=0.1), batches, every=3)
    return all(torch.allclose(p, w) for p, w in zip(model.parameters(), weights))


@pytest.mark.parametrize("form", sorted(GG101_BAD))
def test_no_clearing_with_a_checkpoint_handed_the_optimizer_now_and_then_is_reported(form):
    assert not _trains_like_the_reference(GG101_BAD[form])
    assert _only(GG101_BAD[form], "GG101") == ["GG101", "GG101"]  # both steps of the run-wide flag


@pytest.mark.parametrize("form", sorted(GG101_GOOD))
def test_negative_control_cleared_every_iteration_trains_like_the_reference(form):
    assert _trains_like_the_reference(GG101_GOOD[form])
    assert _only(GG101_GOOD[form], "GG101") == []


# GG101: unknown code handed the optimizer between the backward pass and the step (a clipping helper
# of another package) works on the gradients the step applies; it is no clearing for the next step.
HANDED_BETWEEN = """\
import torch
from utils import clip_gradient


def train(model, optimizer, batches, scaler=None, every=100):
    for step, (x, y) in enumerate(batches):
        loss = ((model(x) - y) ** 2).sum(dim=1).mean()
        loss.backward()
        clip_gradient(optimizer, 10.0)
        optimizer.step()
"""
GG101_HANDED_BAD = {
    "plain": HANDED_BETWEEN,
    "method": HANDED_BETWEEN.replace("def train(model, optimizer,", "class T:\n  def train(self, model, optimizer,")
                            .replace("\n    ", "\n      "),
}
GG101_HANDED_GOOD = {
    "cleared": HANDED_BETWEEN.replace("        loss = ((", "        optimizer.zero_grad()\n        loss = (("),
    # handed the optimizer after the step: it may be what clears (it is never read here)
    "handed-after-step": HANDED_BETWEEN.replace("        clip_gradient(optimizer, 10.0)\n        optimizer.step()\n",
                                                "        optimizer.step()\n        clip_gradient(optimizer, 10.0)\n"),
}


def _runs_handed(source: str) -> bool:
    runnable = source.replace("from utils import clip_gradient", "clip_gradient = lambda *args: None")
    if "class T:" in runnable:
        runnable += "\ntrain = lambda *a, **k: T().train(*a, **k)\n"
    return _trains_like_the_reference(runnable)


@pytest.mark.parametrize("form", sorted(GG101_HANDED_BAD))
def test_no_clearing_with_unknown_code_handed_the_optimizer_before_the_step_is_reported(form):
    assert not _runs_handed(GG101_HANDED_BAD[form])
    assert _only(GG101_HANDED_BAD[form], "GG101") == ["GG101"]


def test_negative_control_the_handed_helper_cleared_around_or_after_the_step():
    assert _runs_handed(GG101_HANDED_GOOD["cleared"])
    assert _only(GG101_HANDED_GOOD["cleared"], "GG101") == []
    # after the step, unknown code handed the optimizer may clear it: no claim is made
    assert _only(GG101_HANDED_GOOD["handed-after-step"], "GG101") == []


# GG101 on an agent whose per-update method steps an optimizer it holds and nothing clears it: the
# module is handed only to the class's own soft update, which reads its parameters in place.
AGENT = """\
import copy
import torch


class Agent:
    def __init__(self, actor):
        self.actor = actor
        self.actor_target = copy.deepcopy(actor)
        self.actor_opt = torch.optim.SGD(self.actor.parameters(), lr=0.1)

    def update(self, x, y):
        loss = ((self.actor(x) - y) ** 2).sum(dim=1).mean()
        loss.backward()
        self.actor_opt.step()
        self._soft_update(self.actor, self.actor_target)

    @staticmethod
    def _soft_update(source, target):
        for p, tp in zip(source.parameters(), target.parameters()):
            tp.data.copy_(0.5 * p.data + 0.5 * tp.data)
"""
LISTED = AGENT.replace("        self._soft_update(self.actor, self.actor_target)\n", "        self._soft_update()\n").replace(
    "    @staticmethod\n    def _soft_update(source, target):\n        for p, tp in",
    "    def _soft_update(self):\n        for source, target in [(self.actor, self.actor_target)]:\n          for p, tp in")
AGENT_BAD = {"static-method": AGENT, "listed": LISTED,
             "renamed": AGENT.replace("actor", "net").replace("Agent", "Learner").replace("_soft_update", "_polyak")}
AGENT_GOOD = {
    "cleared": AGENT.replace("        loss = ((", "        self.actor_opt.zero_grad()\n        loss = (("),
    "listed-cleared": LISTED.replace("        loss = ((", "        self.actor_opt.zero_grad()\n        loss = (("),
}


def _agent_trains_like_the_reference(source: str) -> bool:
    namespace: dict = {}
    exec(compile(source, "<agent>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).double()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64))
               for _ in range(3)]
    weights = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    for x, y in batches:
        grads = torch.autograd.grad(((x @ weights[0].T + weights[1] - y) ** 2).sum(dim=1).mean(), weights)
        weights = [(w - 0.1 * gr).detach().requires_grad_(True) for w, gr in zip(weights, grads)]
    agent = next(v for k, v in namespace.items() if k in ("Agent", "Learner"))(model)
    for x, y in batches:
        agent.update(x, y)
    return all(torch.allclose(p, w) for p, w in zip(model.parameters(), weights))


@pytest.mark.parametrize("form", sorted(AGENT_BAD))
def test_an_agent_that_never_clears_the_optimizer_it_holds_is_reported(form):
    assert not _agent_trains_like_the_reference(AGENT_BAD[form])
    assert _only(AGENT_BAD[form], "GG101") == ["GG101"]


@pytest.mark.parametrize("form", sorted(AGENT_GOOD))
def test_negative_control_the_cleared_agent_trains_like_the_reference(form):
    assert _agent_trains_like_the_reference(AGENT_GOOD[form])
    assert _only(AGENT_GOOD[form], "GG101") == []


def test_negative_control_a_module_handed_to_an_own_method_that_clears_it_is_not_reported():
    clears = AGENT.replace("            tp.data.copy_(0.5 * p.data + 0.5 * tp.data)\n",
                           "            tp.data.copy_(0.5 * p.data + 0.5 * tp.data)\n        source.zero_grad()\n")
    assert _agent_trains_like_the_reference(clears)
    assert _only(clears, "GG101") == []


# GG104: the division written back into an entry of the model's output dict before that entry is
# back-propagated (and multiplied back afterwards, for logging): divided, so no finding; the same loop
# without the division sums K mean losses.
DICT_ENTRY = """\
import torch


def train(net, optimizer, xs, ys, k):
    size = xs.shape[0] // k
    for i in range(k):
        part = slice(i * size, (i + 1) * size)
        out = net(xs[part], ys[part])
        out["loss"] = out["loss"] / k
        out["loss"].backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()
        out["loss"] *= k
        print(out["loss"].item())
"""
DICT_UNDIVIDED = DICT_ENTRY.replace('        out["loss"] = out["loss"] / k\n', "")


class _DictNet(_Net):
    def forward(self, x, y):
        out, loss, _ = super().forward(x, y)
        return {"out": out, "loss": loss}


def _dict_trainer(namespace):
    net = _DictNet()
    opt = torch.optim.SGD(net.parameters(), lr=1.0)

    class _Run:
        def train(self, xs, ys):
            namespace["train"](net, opt, xs, ys, 3)
    return _Run(), list(net.inner.parameters())


def test_an_undivided_dict_entry_is_reported_and_the_divided_one_is_not():
    assert not _applied_matches_full_batch(DICT_UNDIVIDED, _dict_trainer)
    assert _only(DICT_UNDIVIDED, "GG104") == ["GG104"]
    assert _applied_matches_full_batch(DICT_ENTRY, _dict_trainer)  # negative control: the window's mean
    assert _only(DICT_ENTRY, "GG104") == []
    renamed = DICT_ENTRY.replace("out", "res").replace('"loss"', '"objective"')
    assert _only(renamed, "GG104") == []
    assert _only(renamed.replace('        res["objective"] = res["objective"] / k\n', ""), "GG104") == ["GG104"]


def test_negative_control_unknown_code_handed_the_optimizer_before_its_own_pass_still_clears():
    """garage's shape: ``zero_optim_grads(opt)`` (imported) before the pass that feeds ``opt``'s step, after
    another optimizer's pass: it may clear, and sits before the backward it would have to wipe."""
    source = textwrap.dedent("""\
        import torch
        from garage.torch import zero_optim_grads


        def update(critic, actor, critic_opt, actor_opt, x, y):
            zero_optim_grads(critic_opt)
            ((critic(x) - y) ** 2).mean().backward()
            critic_opt.step()
            zero_optim_grads(actor_opt)
            (-critic(actor(x))).mean().backward()
            actor_opt.step()
        """)
    assert _only(source, "GG101") == []
