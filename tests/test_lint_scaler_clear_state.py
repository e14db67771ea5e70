"""What `.grad` holds where a rule looks: the scaler's state at a clip, a closure's clearing, a loss
divided inside its container.

* GG112: an unscale guarded by the same test that scaled the loss (``if scaler is not None and
  scaler.is_enabled():`` at both places, in a micro-step loop), and ``for opt in optimizers:
  scaler.unscale_(opt)`` before the clip, leave no path on which the clip reads scaled gradients; a
  clip reached through another linted file's class is reported in that file, at its own line.
* GG101: a closure that clears under ``if torch.is_grad_enabled():`` clears on every evaluation
  ``opt.step(closure)`` makes (torch's optimizers run the closure with grad mode on).
* GG104: ``out["loss"] = out["loss"] / K`` (or ``/=``) before ``out["loss"].backward()`` is the
  loss's division by the window.

Every correct program is run on the CPU in float64 and compared with an independent plain PyTorch
reference (the scaler's run ends where the run without a scaler ends; each closure step applies only
its own batch's gradient; a window's step applies the mean gradient of the whole window). Every
buggy twin (a clip before the unscale on the path that runs, an unscale under a stricter test, a
scaler the loop rebinds, a clearing under the wrong side of the test, the division written into
another entry) is still reported, and its run leaves the reference.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

import gradguard as gg
from _findings import codes


def _only(source, code):
    return [c for c in codes(source, select=[code])]


def _data(n=8, rows=6):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(rows, 5, generator=g, dtype=torch.float64), torch.randn(rows, 1, generator=g, dtype=torch.float64))
            for _ in range(n)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _load(source, name):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    return namespace[name]


# --------------------------------------------------------------------------------------------- GG112
# both guards read `scaler.is_enabled()`: a call, the same value on every iteration of the loop
SAME_TEST = """\
import torch


def train(model, data, optimizer, scaler, accum, clip):
    for i, (x, y) in enumerate(data):
        loss = ((model(x) - y) ** 2).mean() / accum
        if scaler is not None and scaler.is_enabled():
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (i + 1) % accum == 0:
            if clip > 0:
                if scaler is not None and scaler.is_enabled():
                    scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            if scaler is not None and scaler.is_enabled():
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()
"""

# the same in a class: the scaler an attribute, the unscale and the clip in a method of their own
SAME_TEST_METHOD = """\
import torch


class Runner:
    def __init__(self, net, opt, amp):
        self.net = net
        self.opt = opt
        self.amp = amp

    def _amp_on(self):
        return self.amp is not None

    def _bound(self, limit):
        if self.amp is not None and self.amp.is_enabled():
            self.amp.unscale_(self.opt)
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), limit)

    def run(self, batches, k, limit):
        for j, (a, b) in enumerate(batches):
            err = ((self.net(a) - b) ** 2).mean() / k
            if self.amp is not None and self.amp.is_enabled():
                self.amp.scale(err).backward()
            else:
                err.backward()
            if (j + 1) % k == 0:
                if limit > 0:
                    self._bound(limit)
                if self.amp is not None and self.amp.is_enabled():
                    self.amp.step(self.opt)
                    self.amp.update()
                else:
                    self.opt.step()
                self.opt.zero_grad()


def train(model, data, optimizer, scaler, accum, clip):
    Runner(model, optimizer, scaler).run(data, accum, clip)
"""

# the scale and the unscale in helpers of the file, each testing its own parameter
SAME_TEST_HELPERS = """\
import torch


def clip_grads(gs, o, m, limit):
    if gs is not None and gs.is_enabled():
        gs.unscale_(o)
    torch.nn.utils.clip_grad_norm_(m.parameters(), limit)


def backward(gs, loss):
    if gs is not None and gs.is_enabled():
        gs.scale(loss).backward()
    else:
        loss.backward()


def train(model, data, optimizer, scaler, accum, clip):
    for i, (x, y) in enumerate(data):
        backward(scaler, ((model(x) - y) ** 2).mean() / accum)
        if (i + 1) % accum == 0:
            if clip > 0:
                clip_grads(scaler, optimizer, model, clip)
            if scaler is not None and scaler.is_enabled():
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()
"""

# every optimizer unscaled in a loop over them, then one clip over the model
EACH_OPTIMIZER = """\
import torch


def train(model, data, optimizers, scaler, accum, clip):
    for x, y in data:
        loss = ((model(x) - y) ** 2).mean()
        scaler.scale(loss).backward()
        for opt in optimizers:
            scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for opt in optimizers:
            scaler.step(opt)
        scaler.update()
        for opt in optimizers:
            opt.zero_grad()
"""

GG112_CORRECT = {"same test": SAME_TEST, "same test, method": SAME_TEST_METHOD, "same test, helpers": SAME_TEST_HELPERS,
                 "each optimizer": EACH_OPTIMIZER}


def _optimizers(model, split):
    params = list(model.parameters())
    if not split:
        return torch.optim.SGD(params, lr=0.1)
    return [torch.optim.SGD(params[:2], lr=0.1), torch.optim.SGD(params[2:], lr=0.1)]


def _run_gg112(source, scaler, accum=2, clip=0.05):
    model, data = _model(), _data()
    split = "optimizers" in source
    _load(source, "train")(model, data, _optimizers(model, split), scaler, 1 if split else accum, clip)
    return _flat(model)


def _reference_gg112(accum=2, clip=0.05, split=False):
    """Plain float64 PyTorch: each window's summed gradient of loss / K, clipped, one SGD step."""
    model, data = _model(), _data()
    k = 1 if split else accum
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert len(data) % k == 0  # whole windows: no remainder to step
    for i, (x, y) in enumerate(data):  # gradguard: ignore[GG103] (the assert above: whole windows)
        (((model(x) - y) ** 2).mean() / k).backward()
        if (i + 1) % k == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad()
    return _flat(model)


def _scaler():
    return torch.amp.GradScaler("cpu", init_scale=2.0**10)


@pytest.mark.parametrize("form", sorted(GG112_CORRECT))
def test_gg112_an_unscale_every_path_runs_before_the_clip_is_not_reported(form):
    source = GG112_CORRECT[form]
    assert _only(source, "GG112") == []
    reference = _reference_gg112(split="optimizers" in source)
    assert torch.allclose(_run_gg112(source, _scaler()), reference, atol=1e-9)
    assert torch.allclose(_run_gg112(source, torch.amp.GradScaler("cpu", enabled=False)), reference, atol=1e-9)


def _renamed(source, names):
    for old, new in names:
        source = re.sub(rf"\b{old}\b", new, source)
    return source


@pytest.mark.parametrize("form", sorted(GG112_CORRECT))
def test_gg112_renamed_keeps_the_verdict(form):
    names = (("scaler", "gs"), ("optimizers", "solvers"), ("optimizer", "o"), ("opt", "u"), ("model", "m"), ("amp", "g"))
    assert _only(_renamed(GG112_CORRECT[form], names), "GG112") == []
    # and the renamed program without its unscale is still reported
    bad = re.sub(r"\n( *)((?:if|for) [^\n]*\n *)?[\w.]+\.unscale_\([\w.]+\)\n", "\n", _renamed(GG112_CORRECT[form], names))
    assert "unscale_" not in bad and _only(bad, "GG112") == ["GG112"]


def test_gg112_negative_control_a_clip_before_the_unscale_on_the_path_that_runs():
    bad = SAME_TEST.replace(
        "                if scaler is not None and scaler.is_enabled():\n"
        "                    scaler.unscale_(optimizer)\n"
        "                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n",
        "                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n"
        "                if scaler is not None and scaler.is_enabled():\n"
        "                    scaler.unscale_(optimizer)\n")
    assert bad != SAME_TEST and _only(bad, "GG112") == ["GG112"]
    assert not torch.allclose(_run_gg112(bad, _scaler()), _reference_gg112(), atol=1e-3)


def test_gg112_negative_control_an_unscale_under_a_stricter_test():
    bad = SAME_TEST.replace("                if scaler is not None and scaler.is_enabled():\n                    scaler.unscale_",
                            "                if scaler is not None and scaler.is_enabled() and i > 4:\n                    scaler.unscale_")
    assert bad != SAME_TEST and _only(bad, "GG112") == ["GG112"]
    assert not torch.allclose(_run_gg112(bad, _scaler()), _reference_gg112(), atol=1e-3)


def test_gg112_negative_control_a_scaler_the_loop_rebinds():
    # the window's first pass may be scaled by one scaler, its step guarded by another's test
    bad = SAME_TEST.replace("optimizer, scaler, accum", "optimizer, scalers, accum").replace(
        "        loss = ((model(x) - y) ** 2).mean() / accum\n",
        "        loss = ((model(x) - y) ** 2).mean() / accum\n        scaler = scalers[i % 2]\n")
    assert _only(bad, "GG112") == ["GG112"]


def test_gg112_negative_control_the_method_form_without_its_unscale():
    bad = SAME_TEST_METHOD.replace("        if self.amp is not None and self.amp.is_enabled():\n            self.amp.unscale_(self.opt)\n", "")
    assert bad != SAME_TEST_METHOD and _only(bad, "GG112") == ["GG112"]
    assert not torch.allclose(_run_gg112(bad, _scaler()), _reference_gg112(), atol=1e-3)


@pytest.mark.parametrize("twist", ["clip first", "unscale under a test", "unscale over another collection"])
def test_gg112_negative_control_the_optimizers_loop_that_does_not_cover_the_clip(twist):
    if twist == "unscale over another collection":
        # (an empty one: the optimizers stepped keep their scale)
        bad = EACH_OPTIMIZER.replace("        for opt in optimizers:\n            scaler.unscale_(opt)\n",
                                     "        for opt in optimizers[:0]:\n            scaler.unscale_(opt)\n")
    elif twist == "clip first":
        bad = EACH_OPTIMIZER.replace(
            "        for opt in optimizers:\n            scaler.unscale_(opt)\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n",
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n"
            "        for opt in optimizers:\n            scaler.unscale_(opt)\n")
    else:
        bad = EACH_OPTIMIZER.replace("            scaler.unscale_(opt)\n",
                                     "            if opt.defaults.get(\"amp\"):\n                scaler.unscale_(opt)\n")
    assert bad != EACH_OPTIMIZER and _only(bad, "GG112") == ["GG112"]
    assert not torch.allclose(_run_gg112(bad, _scaler()), _reference_gg112(split=True), atol=1e-3)


BASE = """\
import torch


class Trainer:
    def __init__(self, model, optimizer, scaler):
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler

    def train(self, data):
        for x, y in data:
            loss = ((self.model(x) - y) ** 2).mean()
            self.scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()
"""

# a subclass in another file: its own clip runs only where nothing was scaled; it calls the base's train
SUB = """\
import torch

from base import Trainer


class Sub(Trainer):
    def warmup(self, x, y):
        loss = ((self.model(x) - y) ** 2).mean()
        if self.scaler.is_enabled():
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
        self.optimizer.zero_grad()


def main(model, optimizer, data):
    scaler = torch.amp.GradScaler("cpu")
    trainer = Sub(model, optimizer, scaler)
    trainer.warmup(*data[0])
    trainer.train(data)
"""


def test_gg112_a_clip_of_another_files_class_is_reported_in_that_file_at_its_line(tmp_path):
    (tmp_path / "base.py").write_text(BASE)
    (tmp_path / "sub.py").write_text(SUB)
    found = [(f.path.name if hasattr(f.path, "name") else str(f.path).rsplit("/", 1)[-1], f.line)
             for f in gg.lint_paths([tmp_path], select=["GG112"])]
    assert found == [("base.py", 14)]
    # the base's clip fixed: nothing anywhere
    fixed = BASE.replace("            torch.nn.utils.clip_grad_norm_",
                         "            self.scaler.unscale_(self.optimizer)\n            torch.nn.utils.clip_grad_norm_")
    (tmp_path / "base.py").write_text(fixed)
    assert gg.lint_paths([tmp_path], select=["GG112"]) == []


# --------------------------------------------------------------------------------------------- GG101
CLOSURE = """\
import torch


def fit(model, batches, opt):
    for x, y in batches:

        def closure():
            if torch.is_grad_enabled():
                opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            if loss.requires_grad:
                loss.backward()
            return loss

        opt.step(closure)
"""

# a helper of the file, run through a lambda
CLOSURE_HELPER = """\
import torch


def evaluate(optimizer, model, x, y):
    if torch.is_grad_enabled():
        optimizer.zero_grad()
    err = ((model(x) - y) ** 2).mean()
    if err.requires_grad:
        err.backward()
    return err


def fit(model, batches, optimizer):
    for x, y in batches:
        optimizer.step(lambda: evaluate(optimizer, model, x, y))
"""

# a method whose closure reads the optimizer the object builds
CLOSURE_METHOD = """\
import torch


class Fitter:
    def __init__(self, model, lr):
        self.model = model
        self.solver = torch.optim.SGD(model.parameters(), lr=lr)

    def fit(self, batches):
        for inputs, targets in batches:
            def reevaluate():
                if torch.is_grad_enabled():
                    self.solver.zero_grad()
                value = ((self.model(inputs) - targets) ** 2).mean()
                if value.requires_grad:
                    value.backward()
                return value

            self.solver.step(reevaluate)


def fit(model, batches, opt):
    Fitter(model, opt.param_groups[0]["lr"]).fit(batches)
"""

GG101_CORRECT = {"closure": CLOSURE, "helper": CLOSURE_HELPER, "method": CLOSURE_METHOD}


def _run_gg101(source):
    model, data = _model(), _data()
    _load(source, "fit")(model, data, torch.optim.SGD(model.parameters(), lr=0.1))
    return _flat(model)


def _reference_gg101():
    """Plain float64 PyTorch: each step applies its own batch's gradient, nothing earlier."""
    model, data = _model(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data:
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return _flat(model)


@pytest.mark.parametrize("form", sorted(GG101_CORRECT))
def test_gg101_a_closure_clearing_whenever_grad_mode_is_on_is_a_clear(form):
    source = GG101_CORRECT[form]
    assert _only(source, "GG101") == []
    assert torch.allclose(_run_gg101(source), _reference_gg101(), atol=1e-12)


def test_gg101_renamed_keeps_the_verdict():
    built = CLOSURE.replace("def fit(model, batches, opt):\n",
                            "def fit(model, batches, lr):\n    opt = torch.optim.SGD(model.parameters(), lr=lr)\n")
    renamed = _renamed(built, (("opt", "s"), ("closure", "again"), ("model", "net"), ("loss", "value"), ("x", "u")))
    assert "torch.optim.SGD(net" in renamed and _only(renamed, "GG101") == []
    bad = renamed.replace("if torch.is_grad_enabled():", "if not torch.is_grad_enabled():")
    assert _only(bad, "GG101") == ["GG101"]


@pytest.mark.parametrize("form", sorted(GG101_CORRECT))
def test_gg101_negative_control_a_clearing_under_the_other_side_of_the_test(form):
    bad = GG101_CORRECT[form].replace("if torch.is_grad_enabled():", "if not torch.is_grad_enabled():")
    assert _only(bad, "GG101") == ["GG101"]
    assert not torch.allclose(_run_gg101(bad), _reference_gg101(), atol=1e-3)


def test_gg101_negative_control_a_clearing_under_another_test():
    bad = CLOSURE.replace("if torch.is_grad_enabled():", "if x.requires_grad:")
    assert _only(bad, "GG101") == ["GG101"]
    assert not torch.allclose(_run_gg101(bad), _reference_gg101(), atol=1e-3)


# --------------------------------------------------------------------------------------------- GG104
DICT_LOSS = """\
import torch


def train(model, data, optimizer, accum):
    optimizer.zero_grad()
    for i, (x, y) in enumerate(data):
        out = model(x, y)
        out["loss"] = out["loss"] / accum
        out["loss"].backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""

DICT_LOSS_METHOD = """\
import torch


class Loop:
    def __init__(self, net, solver, window):
        self.net = net
        self.solver = solver
        self.window = window

    def epoch(self, batches):
        self.solver.zero_grad()
        for n, (a, b) in enumerate(batches):
            terms = self.net(a, b)
            terms["loss"] /= self.window
            terms["loss"].backward()
            if (n + 1) % self.window == 0:
                self.solver.step()
                self.solver.zero_grad()


def train(model, data, optimizer, accum):
    Loop(model, optimizer, accum).epoch(data)
"""

GG104_CORRECT = {"function": DICT_LOSS, "method, in place": DICT_LOSS_METHOD}


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = _model()

    def forward(self, x, y):
        pred = self.body(x)
        return {"loss": ((pred - y) ** 2).mean(), "aux": pred.abs().mean()}


def _run_gg104(source, accum=2):
    torch.manual_seed(0)
    net, data = _Net(), _data()
    _load(source, "train")(net, data, torch.optim.SGD(net.parameters(), lr=0.1), accum)
    return _flat(net)


def _reference_gg104(accum=2):
    """Plain float64 PyTorch: one step per window on the mean loss of the whole window (equal micro-batches)."""
    torch.manual_seed(0)
    net, data = _Net(), _data()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for w in range(0, len(data), accum):
        x = torch.cat([d[0] for d in data[w:w + accum]])
        y = torch.cat([d[1] for d in data[w:w + accum]])
        opt.zero_grad()
        net(x, y)["loss"].backward()
        opt.step()
    return _flat(net)


@pytest.mark.parametrize("form", sorted(GG104_CORRECT))
def test_gg104_a_division_written_back_into_the_entry_the_backward_reads(form):
    source = GG104_CORRECT[form]
    assert _only(source, "GG104") == []
    assert torch.allclose(_run_gg104(source), _reference_gg104(), atol=1e-12)


def test_gg104_renamed_key_and_names_keep_the_verdict():
    renamed = _renamed(DICT_LOSS.replace('"loss"', '"objective"'), (("accum", "k"), ("out", "res"), ("optimizer", "o")))
    assert _only(renamed, "GG104") == []
    bad = renamed.replace('        res["objective"] = res["objective"] / k\n', "")
    assert bad != renamed and _only(bad, "GG104") == ["GG104"]


@pytest.mark.parametrize("twist", ["no division", "divided into another entry"])
def test_gg104_negative_control_the_entry_backward_reads_left_undivided(twist):
    if twist == "no division":
        bad = DICT_LOSS.replace('        out["loss"] = out["loss"] / accum\n', "")
    else:
        bad = DICT_LOSS.replace('out["loss"] = out["loss"] / accum', 'out["scaled"] = out["loss"] / accum')
    assert bad != DICT_LOSS and _only(bad, "GG104") == ["GG104"]
    assert not torch.allclose(_run_gg104(bad), _reference_gg104(), atol=1e-3)


def test_gg104_negative_control_the_method_form_without_its_division():
    bad = DICT_LOSS_METHOD.replace('            terms["loss"] /= self.window\n', "")
    assert bad != DICT_LOSS_METHOD and _only(bad, "GG104") == ["GG104"]
    assert not torch.allclose(_run_gg104(bad), _reference_gg104(), atol=1e-3)
