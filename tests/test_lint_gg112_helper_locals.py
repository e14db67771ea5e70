"""GG112: a helper's own local of the caller's name does not unsettle the caller's flag.

A trainer scales the loss under ``if args.fp16:`` and unscales under the same test before a clip
that sits under another ``if``; between the two it calls a helper of the file (logging, evaluation)
that binds a local of the same name (``args = self.args``). That assignment rebinds the helper's
variable, not the caller's: once the helper returns, the caller's ``args.fp16`` still has the side
that scaled the loss. Forgetting it let the next iteration take the unscaled side at the unscale
while the scale was still in ``.grad`` (false GG112 on large real trainers, where many unrelated
``if args.x:`` branches also make the walk join its paths).

Judged by running each form with a CPU GradScaler in float64: with ``fp16`` on, the parameters end
where the same run without a scaler puts them (the clip saw unscaled gradients). Negative controls:
the same programs with the unscale removed from the scaled path are reported, and their parameters
move away from the unscaled run; a helper that assigns the caller's flag through ``global`` still
unsettles it.
"""

from __future__ import annotations

import types

import pytest
import torch

from _findings import codes

# unrelated flags tested between the backward pass and the step (the large trainers' logging,
# saving and evaluation switches): more paths than the walk keeps apart
_FLAGS = 10


def _method_form(scaled_first: bool = True, many: bool = True, name: str = "args") -> str:
    a = name
    backward = (f"            if {a}.fp16:\n                scaler.scale(loss).backward()\n"
                f"            else:\n                loss.backward()\n") if scaled_first else (
                f"            if not {a}.fp16:\n                loss.backward()\n"
                f"            else:\n                scaler.scale(loss).backward()\n")
    branches = "".join(f"            if {a}.flag{k}:\n                self.seen.append({k})\n"
                       for k in range(_FLAGS if many else 0))
    return f"""\
import torch


class Trainer:
    def __init__(self, model, optimizer, settings, scaler):
        self.model = model
        self.optimizer = optimizer
        self.args = settings
        self.scaler = scaler
        self.seen = []

    def _report(self, loss):
        {a} = self.args
        if {a}.verbose:
            self.seen.append(float(loss.detach()))

    def train(self, data):
        {a} = self.args
        model, optimizer, scaler = self.model, self.optimizer, self.scaler
        for step, (x, y) in enumerate(data):
            loss = ((model(x) - y) ** 2).mean() / {a}.accum
{backward}            self._report(loss)
{branches}            if (step + 1) % {a}.accum == 0:
                if {a}.fp16:
                    scaler.unscale_(optimizer)
                if {a}.optimizer == "SGD":
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
                if {a}.fp16:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                optimizer.zero_grad()


def run(model, data, optimizer, settings, scaler):
    Trainer(model, optimizer, settings, scaler).train(data)
"""


def _function_form() -> str:
    # module functions; the helper rebinds its parameter of the same name
    branches = "".join(f"        if cfg.flag{k}:\n            seen.append({k})\n" for k in range(_FLAGS))
    return f"""\
import torch


def summarise(loss, cfg, seen):
    cfg = dict(vars(cfg))
    if cfg["verbose"]:
        seen.append(float(loss.detach()))


def run(model, data, optimizer, cfg, scaler):
    seen = []
    for step, (x, y) in enumerate(data):
        loss = ((model(x) - y) ** 2).mean() / cfg.accum
        if cfg.fp16:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        summarise(loss, cfg, seen)
{branches}        if (step + 1) % cfg.accum == 0:
            if cfg.fp16:
                scaler.unscale_(optimizer)
            if cfg.optimizer == "SGD":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            if cfg.fp16:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()
"""


FORMS = {
    "method": _method_form(),
    "method-renamed": _method_form(name="hp"),
    "method-else-first": _method_form(scaled_first=False),
    "method-few-branches": _method_form(many=False),
    "function-helper-parameter": _function_form(),
}

_UNSCALE = {
    "method": "                if {a}.fp16:\n                    scaler.unscale_(optimizer)\n",
    "function-helper-parameter": "            if cfg.fp16:\n                scaler.unscale_(optimizer)\n",
}


def _without_unscale(form: str) -> str:
    source = FORMS[form]
    a = "hp" if form == "method-renamed" else "args"
    line = _UNSCALE["function-helper-parameter" if form.startswith("function") else "method"].format(a=a)
    assert line in source
    return source.replace(line, "")


def _gg112(source):
    return [c for c in codes(source) if c == "GG112"]


def _run(source, fp16: bool):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(6, 5, generator=g, dtype=torch.float64), torch.randn(6, 1, generator=g, dtype=torch.float64))
            for _ in range(8)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    settings = types.SimpleNamespace(fp16=fp16, accum=2, optimizer="SGD", verbose=True,
                                     **{f"flag{k}": k % 2 == 0 for k in range(_FLAGS)})
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10) if fp16 else None
    namespace["run"](model, data, opt, settings, scaler)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_helper_binding_its_own_local_of_the_flags_name_is_not_reported(form):
    source = FORMS[form]
    assert _gg112(source) == []
    # and the clip saw unscaled gradients: with fp16 the run ends where the run without a scaler ends
    assert torch.allclose(_run(source, True), _run(source, False), atol=1e-6)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_negative_control_the_unscale_missing_on_the_scaled_path_is_reported(form):
    bad = _without_unscale(form)
    assert _gg112(bad) == ["GG112"]
    # the clip saw scaled gradients: the parameters move away from the unscaled run
    assert not torch.allclose(_run(bad, True), _run(bad, False), atol=1e-3)


def test_negative_control_a_helper_rebinding_the_callers_global_flag_unsettles_it():
    # `use_amp` is the module's: the helper's `global use_amp; use_amp = ...` changes what the caller's
    # next `if use_amp:` reads, so a scaled micro-step may meet a step that skips the unscale
    bad = """\
import torch

use_amp = True


def toggle(step):
    global use_amp
    use_amp = step % 3 != 0


def run(model, data, optimizer, scaler):
    for step, (x, y) in enumerate(data):
        loss = ((model(x) - y) ** 2).mean() / 2
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        toggle(step)
        if (step + 1) % 2 == 0:
            if use_amp:
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
"""
    assert _gg112(bad) == ["GG112"]


# The window's micro-batches back-propagate in a helper that receives the caller's settings as a
# parameter and scales under its own `if args.fp16:` (Transformer-XL's train_iteration); the caller
# unscales under the same test. The parameter is the caller's unchanged `args` at every call.
PARAMETER = """\
import torch


def micro_step(model, x, y, scaler, args):
    loss = ((model(x) - y) ** 2).mean() / args.accum
    if args.fp16:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    return float(loss.detach())


def run(model, data, optimizer, args, scaler):
    for step in range(0, len(data), args.accum):
        optimizer.zero_grad()
        for x, y in data[step:step + args.accum]:
            micro_step(model, x, y, scaler, args)
        if args.fp16:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        if args.fp16:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
"""


def test_a_helper_parameter_given_the_callers_unchanged_flag_keeps_its_side():
    assert _gg112(PARAMETER) == []
    assert _gg112(PARAMETER.replace("args", "opts")) == []
    assert torch.allclose(_run(PARAMETER, True), _run(PARAMETER, False), atol=1e-6)


def test_negative_control_a_helper_parameter_given_a_per_iteration_value_is_still_reported():
    # each micro-batch gets its own settings object: its fp16 may differ from the one the step tests
    bad = PARAMETER.replace("            micro_step(model, x, y, scaler, args)\n",
                            "            micro_step(model, x, y, scaler, pick(args, step))\n")
    bad = bad.replace("def run(", "def pick(args, step):\n    return args\n\n\ndef run(")
    assert "pick(args, step))" in bad and _gg112(bad) == ["GG112"]


def test_negative_control_the_helper_parameter_form_without_the_unscale_is_reported():
    bad = PARAMETER.replace("            scaler.unscale_(optimizer)\n", "")
    assert bad != PARAMETER and _gg112(bad) == ["GG112"]
    assert not torch.allclose(_run(bad, True), _run(bad, False), atol=1e-3)
