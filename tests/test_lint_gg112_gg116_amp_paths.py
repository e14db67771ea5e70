"""GG112 and GG116 on mixed-precision loops whose scaled and unscaled paths never meet.

Shapes from real trainers, each written here in several forms (names, helpers, methods, the
branches in either order) and judged by running it in float64 on the CPU's GradScaler:

* GG112, a flag that keeps its value across the loop: a module global read in a helper that
  scales the loss, or a ``self.`` attribute a builder method sets once before the loop. The
  scaled path always meets the unscale under the same flag: with the scaler the loop ends where
  the same loop without one ends. Negative control: a function the loop runs sets the flag.
* GG112, a stand-in ``GradScaler`` class of the file (for an old torch) whose ``unscale_`` does
  nothing: the real scaler's ``unscale_`` still runs before the clip. The run with the real
  scaler ends where the run with the stand-in ends. Negative control: the unscale removed.
* GG112, a clip whose threshold carries the scale (``max_norm * scaler.get_scale()``) on the
  scaled gradients: the same update as an unscale and a clip at ``max_norm``. Negative control:
  the threshold divided by the scale (a different clip) is still reported.
* GG116, a clip between a scaler's ``unscale_`` and its ``step`` in the scaled branch while the
  other branch steps the optimizer itself: applied (the run ends on the clipped trajectory).
  Negative control: a clip after the plain branch's step is still reported, and runs unclipped.
"""

from __future__ import annotations

import pytest
import torch

from _findings import codes

MAX_NORM = 0.05


def _lint(source: str, code: str) -> list:
    return [c for c in codes(source) if c == code]


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 5, generator=g, dtype=torch.float64), torch.randn(6, 1, generator=g, dtype=torch.float64))
            for _ in range(8)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _scaler():
    return torch.amp.GradScaler("cpu", init_scale=2.0**10)


def _reference(accum: int, clip: bool) -> torch.Tensor:
    """Plain PyTorch in float64: the mean gradient of each window of ``accum`` batches, clipped at
    MAX_NORM (or not) before each SGD step."""
    model, data = _model(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for start in range(0, len(data), accum):
        opt.zero_grad()
        window = data[start:start + accum]
        for x, y in window:
            (((model(x) - y) ** 2).mean() / len(window)).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        opt.step()
    return _flat(model)


def _run(source: str, *args, **kwargs) -> torch.Tensor:
    namespace: dict = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    namespace["train"](model, _data(), opt, *args, **kwargs)
    return _flat(model)


def _close(a, b, atol=1e-9) -> bool:
    return torch.allclose(a, b, atol=atol, rtol=0)


# ---------------------------------------------------------------- a flag unchanged by the loop

# a module global read in the helper that scales, and again at the step (an old trainer's
# `_use_native_amp`), three branches at the clip: native scaler, another mixed precision, none
GLOBAL_FLAG = """\
import torch

USE_AMP = True
OTHER_AMP = False


def backward_pass(loss, scaler):
    if USE_AMP:
        scaler.scale(loss).backward()
    elif OTHER_AMP:
        (loss * 1.0).backward()
    else:
        loss.backward()


def train(model, data, optimizer, scaler, accum=2):
    for i, (x, y) in enumerate(data):
        loss = ((model(x) - y) ** 2).mean() / accum
        backward_pass(loss, scaler)
        if (i + 1) % accum == 0:
            if USE_AMP:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            elif OTHER_AMP:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            if USE_AMP:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()
"""

# a method builds the scaler and sets the flag, once, before the loop (not in __init__)
BUILDER_FLAG = """\
import torch


class Runner:
    def __init__(self, model, optimizer, scaler):
        self.net, self.opt, self.given = model, optimizer, scaler
        self.with_amp = False

    def prepare_precision(self):
        self.with_amp = self.given is not None
        self.grad_scaler = self.given

    def backward_of(self, loss):
        if self.with_amp:
            self.grad_scaler.scale(loss).backward()
        else:
            loss.backward()

    def update(self):
        if self.with_amp:
            self.grad_scaler.unscale_(self.opt)
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), 0.05)
        if self.with_amp:
            self.grad_scaler.step(self.opt)
            self.grad_scaler.update()
        else:
            self.opt.step()
        self.opt.zero_grad()

    def fit(self, data, accum):
        self.prepare_precision()
        for i, (x, y) in enumerate(data):
            self.backward_of(((self.net(x) - y) ** 2).mean() / accum)
            if (i + 1) % accum == 0:
                self.update()


def train(model, data, optimizer, scaler, accum=2):
    Runner(model, optimizer, scaler).fit(data, accum)
"""


def test_a_module_global_flag_read_in_a_helper_is_not_reported_and_the_clip_sees_unscaled_gradients():
    assert _lint(GLOBAL_FLAG, "GG112") == []
    # the other order of the branches and other names: the same verdict
    renamed = GLOBAL_FLAG.replace("USE_AMP", "native").replace("scaler", "gs").replace("backward_pass", "bw")
    assert _lint(renamed, "GG112") == []
    with_amp = _run(GLOBAL_FLAG, scaler=_scaler())
    without = _run(GLOBAL_FLAG.replace("USE_AMP = True", "USE_AMP = False"), scaler=None)
    assert _close(with_amp, _reference(2, clip=True)) and _close(without, _reference(2, clip=True))
    assert not _close(with_amp, _reference(2, clip=False)), "the threshold must bind"


def test_negative_control_a_global_flag_a_function_of_the_loop_sets_is_reported():
    bad = GLOBAL_FLAG.replace("def train(", "def toggle(i):\n    global USE_AMP\n    USE_AMP = i % 3 != 1\n\n\ndef train(")
    bad = bad.replace("        backward_pass(loss, scaler)\n", "        toggle(i)\n        backward_pass(loss, scaler)\n")
    assert "toggle(i)" in bad and _lint(bad, "GG112") != []
    # and it is wrong: a micro-batch scaled while the flag was on reaches a clip made while it is off
    assert not _close(_run(bad, scaler=_scaler()), _reference(2, clip=True))


def test_negative_control_a_helper_local_of_the_flags_name_is_not_the_loops_flag():
    # the helper's `USE_AMP` is its own parameter (always on) while the module's flag is off: the
    # helper scales every loss and the loop never unscales
    bad = GLOBAL_FLAG.replace("def backward_pass(loss, scaler):", "def backward_pass(loss, scaler, USE_AMP=True):")
    bad = bad.replace("USE_AMP = True\n", "USE_AMP = False\n")
    assert _lint(bad, "GG112") != []
    assert not _close(_run(bad, scaler=_scaler()), _reference(2, clip=True))


def test_a_flag_set_by_a_builder_method_before_the_loop_is_not_reported():
    assert _lint(BUILDER_FLAG, "GG112") == []
    renamed = BUILDER_FLAG.replace("with_amp", "fp16").replace("grad_scaler", "s").replace("prepare_precision", "setup")
    assert _lint(renamed, "GG112") == []
    assert _close(_run(BUILDER_FLAG, scaler=_scaler()), _reference(2, clip=True))
    assert _close(_run(BUILDER_FLAG, scaler=None), _reference(2, clip=True))


def test_negative_control_the_builder_called_inside_the_loop_is_reported():
    bad = BUILDER_FLAG.replace("            self.backward_of(", "            self.prepare_precision()\n            self.backward_of(")
    assert bad != BUILDER_FLAG and _lint(bad, "GG112") == ["GG112"]


# ---------------------------------------------------------------- a stand-in scaler class of the file

STAND_IN = """\
import torch

try:
    from torch.amp import GradScaler
except ImportError:
    class GradScaler:  # for a torch without one: no scaling at all
        def __init__(self, *args, **kwargs):
            pass

        def scale(self, loss):
            return loss

        def unscale_(self, optimizer):
            pass

        def step(self, optimizer):
            optimizer.step()

        def update(self):
            pass


def train(model, data, optimizer):
    scaler = GradScaler("cpu", init_scale=2.0**10)
    for x, y in data:
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        scaler.step(optimizer)
        scaler.update()
"""


def _without_torch_scaler(source: str) -> str:
    out = source.replace("    from torch.amp import GradScaler\n", "    raise ImportError\n")
    assert out != source
    return out


@pytest.mark.parametrize("form", ["plain", "renamed", "method"])
def test_a_stand_in_scaler_class_does_not_hide_the_real_unscale(form):
    source = STAND_IN
    if form == "renamed":
        source = source.replace("scaler", "amp_state").replace("optimizer", "o")
    elif form == "method":
        source = source.replace("def train(model, data, optimizer):", "class T:\n    def run(self, model, data, optimizer):")
        body = source.split("    def run(self, model, data, optimizer):\n")[1]
        source = source.split("    def run(")[0] + "    def run(self, model, data, optimizer):\n" + \
            "".join("    " + line if line.strip() else line for line in body.splitlines(True))
        source += "\n\ndef train(model, data, optimizer):\n    T().run(model, data, optimizer)\n"
    assert _lint(source, "GG112") == []
    real = _run(source)
    assert _close(real, _run(_without_torch_scaler(source))), "the real scaler's run ends where no scaling does"
    assert _close(real, _reference(1, clip=True))


def test_negative_control_a_stand_in_scaler_without_the_unscale_is_reported():
    bad = STAND_IN.replace("        scaler.unscale_(optimizer)\n", "")
    assert bad != STAND_IN and _lint(bad, "GG112") == ["GG112"]
    assert not _close(_run(bad), _run(_without_torch_scaler(bad)))


# ---------------------------------------------------------------- a threshold told the scale

TOLD = """\
import torch


def train(model, data, optimizer, scaler):
    for x, y in data:
        optimizer.zero_grad()
        scaler.scale(((model(x) - y) ** 2).mean()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05 * scaler.get_scale())
        scaler.step(optimizer)
        scaler.update()
"""

TOLD_FORMS = {
    "product": TOLD,
    "factor_first_keyword": TOLD.replace("model.parameters(), 0.05 * scaler.get_scale()",
                                         "model.parameters(), max_norm=scaler.get_scale() * 0.05"),
    "bound_name": TOLD.replace("        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05 * scaler.get_scale())\n",
                               "        current = scaler.get_scale()\n"
                               "        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05 * current)\n"),
    "helper": TOLD.replace("        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05 * scaler.get_scale())\n",
                           "        bound_grads(model, 0.05 * scaler.get_scale())\n")
    + "\n\ndef bound_grads(net, limit):\n    torch.nn.utils.clip_grad_norm_(net.parameters(), limit)\n",
}


@pytest.mark.parametrize("form", sorted(TOLD_FORMS))
def test_a_threshold_scaled_with_the_gradients_is_not_reported_and_is_the_unscaled_clip(form):
    source = TOLD_FORMS[form]
    assert _lint(source, "GG112") == []
    assert _lint(source.replace("scaler", "loss_amp"), "GG112") == []
    # (clip_grad_norm_ adds 1e-6 to the norm it divides by: scaled, that epsilon weighs 1/scale as much)
    assert _close(_run(source, scaler=_scaler()), _reference(1, clip=True), atol=1e-7)


def test_negative_control_a_threshold_divided_by_the_scale_is_reported_and_wrong():
    bad = TOLD.replace("0.05 * scaler.get_scale()", "0.05 / scaler.get_scale()")
    assert _lint(bad, "GG112") == ["GG112"]
    assert not _close(_run(bad, scaler=_scaler()), _reference(1, clip=True), atol=1e-4)


def test_negative_control_the_plain_threshold_on_scaled_gradients_is_reported_and_wrong():
    bad = TOLD.replace("0.05 * scaler.get_scale()", "0.05")
    assert _lint(bad, "GG112") == ["GG112"]
    assert not _close(_run(bad, scaler=_scaler()), _reference(1, clip=True), atol=1e-4)


# ---------------------------------------------------------------- GG116: the clip on the scaled path

BRANCHES = """\
import torch


def train(model, data, optimizer, amp=None):
    for x, y in data:
        loss = ((model(x) - y) ** 2).mean()
        if amp is not None:
            amp.scale(loss).backward()
            amp.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            amp.step(optimizer)
            amp.update()
            optimizer.zero_grad()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            optimizer.step()
            optimizer.zero_grad()
"""

# the plain branch first (the scaled branch's clip after every plain event in the text)
BRANCHES_SWAPPED = """\
import torch


def train(model, data, optimizer, amp=None):
    for x, y in data:
        loss = ((model(x) - y) ** 2).mean()
        if amp is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            optimizer.step()
            optimizer.zero_grad()
        else:
            amp.scale(loss).backward()
            amp.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            amp.step(optimizer)
            amp.update()
            optimizer.zero_grad()
"""

GG116_FORMS = {
    "scaled_first": BRANCHES,
    "scaled_second": BRANCHES_SWAPPED,
    "scaled_first_renamed": BRANCHES.replace("amp", "grad_amp").replace("optimizer", "o"),
    "flag": BRANCHES.replace("if amp is not None:", "if fp16:").replace("amp=None):", "amp=None, fp16=True):\n"
                                                                               "    fp16 = amp is not None"),
}


@pytest.mark.parametrize("form", sorted(GG116_FORMS))
def test_a_clip_between_a_scalers_unscale_and_step_is_applied_and_not_gg116(form):
    source = GG116_FORMS[form]
    assert _lint(source, "GG116") == []
    assert _lint(source, "GG112") == []
    clipped = _reference(1, clip=True)
    assert _close(_run(source, _scaler()), clipped) and _close(_run(source), clipped)
    assert not _close(clipped, _reference(1, clip=False)), "the threshold must bind"


@pytest.mark.parametrize("form", ["scaled_first", "scaled_second"])
def test_negative_control_a_clip_after_the_plain_branchs_step_is_still_gg116(form):
    source = GG116_FORMS[form]
    bad = source.replace("            loss.backward()\n            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)\n"
                         "            optimizer.step()\n",
                         "            loss.backward()\n            optimizer.step()\n"
                         "            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)\n")
    assert bad != source and _lint(bad, "GG116") == ["GG116"]
    assert _close(_run(bad), _reference(1, clip=False)), "a clip after the step changes no update"


# ---------------------------------------------------------------- the same words in a function the loop never runs

LOCAL_SCALER = """\
import torch


def describe(model, scaler):
    if scaler:
        print("mixed precision for", type(model).__name__)


def train(model, data, optimizer, use_scaler=True):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10) if use_scaler else None
    describe(model, scaler)
    for i, (x, y) in enumerate(data):
        loss = ((model(x) - y) ** 2).mean() / 2
        if scaler:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (i + 1) % 2 == 0:
            if scaler:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
                scaler.step(optimizer)
                scaler.update()
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
                optimizer.step()
            optimizer.zero_grad()
"""


def test_a_test_of_the_same_words_in_a_function_the_loop_never_runs_does_not_unsettle_the_flag():
    assert _lint(LOCAL_SCALER, "GG112") == []
    assert _lint(LOCAL_SCALER.replace("describe", "log_setup").replace("scaler", "amp_s"), "GG112") == []
    assert _close(_run(LOCAL_SCALER), _reference(2, clip=True)) and _close(_run(LOCAL_SCALER, False), _reference(2, clip=True))


def test_negative_control_the_loop_rebinding_the_scaler_mid_window_is_reported_and_wrong():
    bad = LOCAL_SCALER.replace("        loss = ((model(x) - y) ** 2).mean() / 2\n",
                               "        loss = ((model(x) - y) ** 2).mean() / 2\n        scaler = None if i == 3 else scaler\n")
    assert bad != LOCAL_SCALER and _lint(bad, "GG112") != []
    assert not _close(_run(bad), _reference(2, clip=True))
