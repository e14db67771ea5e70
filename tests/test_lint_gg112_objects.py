"""GG112 in the linter when the scaled backward, the clip or the unscale sits in another object's method,
or the clip is called through a ``partial`` or a lambda held in a name or an attribute.

Each buggy program is run on the CPU's GradScaler and compared with an independent reference, a plain
loop written by hand that unscales before the clip: the buggy program must end elsewhere (the clip saw
gradients multiplied by the scale: the bug has an effect), and its correct twin (the same program with
the unscale in place) must end exactly at the reference. The linter must flag every buggy program and
none of the twins, whatever the objects, methods and names are called.
"""

from __future__ import annotations

import pytest
import torch

from _findings import codes

# A plugin object does the scaled backward and the step; the loop clips between the two.
PLUGIN = """\
import torch


class Amp:
    def __init__(self):
        self.s = torch.amp.GradScaler("cpu")

    def back(self, loss):
        self.s.scale(loss).backward()

    def unscale(self, opt):
        self.s.unscale_(opt)

    def apply(self, opt):
        self.s.step(opt)
        self.s.update()


class Runner:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt
        self.amp = Amp()

    def fit(self, data):
        for x, y in data:
            loss = ((self.model(x) - y) ** 2).mean()
            self.amp.back(loss)
            # FIX: self.amp.unscale(self.opt)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.5)
            self.amp.apply(self.opt)
            self.opt.zero_grad()


def train(model, data, opt):
    Runner(model, opt).fit(data)
"""

# The clip and the step sit in another object's method that is handed the scaler (a local object).
STEPPER = """\
import torch


class Stepper:
    def __init__(self, net, optim, limit=0.5):
        self.net, self.optim, self.limit = net, optim, limit

    def finish(self, amp_scaler):
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.limit)
        amp_scaler.step(self.optim)
        amp_scaler.update()
        self.optim.zero_grad()


def train(model, data, opt):
    scaler = torch.amp.GradScaler("cpu")
    stepper = Stepper(model, opt)
    for x, y in data:
        scaler.scale(((model(x) - y) ** 2).mean()).backward()
        # FIX: scaler.unscale_(opt)
        stepper.finish(scaler)
"""

# The clip held in an attribute as a partial; the engine handed to the callback's constructor.
PARTIAL = """\
from functools import partial

import torch


class Engine:
    def __init__(self):
        self.gs = torch.amp.GradScaler("cpu")

    def backward_loss(self, loss):
        self.gs.scale(loss).backward()

    def optimizer_step(self, optimizer):
        self.gs.step(optimizer)
        self.gs.update()
        optimizer.zero_grad()


class Callback:
    def __init__(self, engine, model, optimizer):
        self.engine, self.model, self.optimizer = engine, model, optimizer
        self.clip_fn = partial(torch.nn.utils.clip_grad_norm_, max_norm=0.5)

    def on_batch_end(self, loss):
        self.engine.backward_loss(loss)
        # FIX: self.engine.gs.unscale_(self.optimizer)
        self.clip_fn(self.model.parameters())
        self.engine.optimizer_step(self.optimizer)


def train(model, data, opt):
    callback = Callback(Engine(), model, opt)
    for x, y in data:
        callback.on_batch_end(((model(x) - y) ** 2).mean())
"""

# The clip as a lambda bound to a name; the scaled backward in a plugin kept in a local variable.
LAMBDA = """\
import torch

limit_norm = lambda params: torch.nn.utils.clip_grad_norm_(params, 0.5)


class Precision:
    def __init__(self):
        self.grad_scaler = torch.amp.GradScaler("cpu")

    def backward(self, loss):
        self.grad_scaler.scale(loss).backward()


def train(model, data, opt):
    precision = Precision()
    for x, y in data:
        precision.backward(((model(x) - y) ** 2).mean())
        # FIX: precision.grad_scaler.unscale_(opt)
        limit_norm(model.parameters())
        precision.grad_scaler.step(opt)
        precision.grad_scaler.update()
        opt.zero_grad()
"""

PROGRAMS = {"plugin": PLUGIN, "stepper": STEPPER, "partial": PARTIAL, "lambda": LAMBDA}


def twin(source: str) -> str:
    """The correct twin: each ``# FIX:`` line uncommented."""
    return "\n".join(line.replace("# FIX: ", "") for line in source.split("\n"))


def _gg112(source):
    return [c for c in codes(source) if c == "GG112"]


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 5, generator=g), torch.randn(6, 1, generator=g) * 3) for _ in range(6)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _run(source):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model = _model()
    namespace["train"](model, _data(), torch.optim.SGD(model.parameters(), lr=0.1))
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _reference():
    """The plain loop written by hand: unscale, then clip the true gradient, then step."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    for x, y in _data():
        scaler.scale(((model(x) - y) ** 2).mean()).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_bug_is_flagged_and_changes_the_update_its_twin_is_silent_and_exact(name):
    source = PROGRAMS[name]
    assert _gg112(source) == ["GG112"]
    assert _gg112(twin(source)) == []
    reference = _reference()
    assert torch.allclose(_run(twin(source)), reference, rtol=0, atol=1e-6)
    assert not torch.allclose(_run(source), reference, atol=1e-3)  # negative control: the bug has an effect


def _renamed(source):
    for old, new in (("Amp", "Mixed"), (".back(", ".run_backward("), ("def back(", "def run_backward("), ("Stepper", "Finisher"), ("finish", "close_window"),
                     ("Engine", "Backend"), ("clip_fn", "grad_limit"), ("Precision", "Plug"), ("limit_norm", "bound"),
                     ("self.s.", "self.state_."), ("self.s =", "self.state_ =")):
        source = source.replace(old, new)
    return source


def _through_a_local(source):
    """The object held in a local name instead of an attribute (or the other way round): unrelated code between."""
    return source.replace("    Runner(model, opt).fit(data)", "    runner = Runner(model, opt)\n    unused = [1, 2]\n    runner.fit(data)")


def _engine_by_keyword(source):
    return source.replace("Callback(Engine(), model, opt)", "Callback(model=model, optimizer=opt, engine=Engine())")


def _engine_by_name(source):
    return source.replace("    callback = Callback(Engine(), model, opt)",
                          "    engine = Engine()\n    callback = Callback(engine, model, opt)")


@pytest.mark.parametrize("rewrite", [_renamed, _through_a_local, _engine_by_keyword, _engine_by_name],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rewrites_that_keep_the_computation_keep_the_verdict(name, rewrite):
    source = rewrite(PROGRAMS[name])
    assert _gg112(source) == ["GG112"]
    assert _gg112(twin(source)) == []


def test_a_method_of_the_same_name_on_an_unknown_object_is_not_followed():
    """``loss.backward()`` is not the plugin's ``backward``: only an object the file builds from the class is."""
    source = LAMBDA.replace("        precision.backward(((model(x) - y) ** 2).mean())\n",
                            "        ((model(x) - y) ** 2).mean().backward()\n")
    assert _gg112(source) == []  # no scaled pass at all
