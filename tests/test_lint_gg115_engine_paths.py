"""GG115: a clip that runs only on the paths that close every iteration's window; a clip reached in
another file's method is reported at this file's call.

Megatron-style trainers back-propagate through an engine (``model.backward(loss)``, ``model.step()``)
when one is configured, and otherwise clear, back-propagate, clip and step on every iteration; the
clip sits under ``if not args.engine:``. The engine's paths back-propagate without an optimizer step
the linter sees, but they never reach the clip, and the flag is the run's (nothing an iteration runs
sets it), so no iteration clips a partial window. Judged by running the plain path in float64: each
step applies the clipped full gradient of its own batch (the reference clears, back-propagates,
clips and steps by hand). Negative controls: the same loop with a flag the loop sets, and the same
clip on a plain path that accumulates over a modulo window, are reported, and there the clipped
update differs from clipping the window's whole gradient.
"""

from __future__ import annotations

import types

import pytest
import torch

import gradguard as gg
from _findings import codes

FUNCTION = """\
import torch


def backward_step(model, optimizer, loss, args):
    if args.engine:
        model.backward(loss)
    else:
        optimizer.zero_grad()
        loss.backward()
    if not args.engine:
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)


def train(model, optimizer, data, args):
    for x, y in data:
        loss = ((model(x) - y) ** 2).mean()
        backward_step(model, optimizer, loss, args)
        if args.engine:
            model.step()
        else:
            optimizer.step()
"""

# the same in methods, the clip in the `else` of the engine test, the names changed
METHOD = """\
import torch


class Runner:
    def __init__(self, net, opt, cfg):
        self.net, self.opt, self.cfg = net, opt, cfg

    def _bw(self, out):
        if self.cfg.use_engine:
            self.net.backward(out)
        else:
            self.opt.zero_grad()
            out.backward()
        if self.cfg.use_engine:
            pass
        else:
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.cfg.clip)

    def _update(self):
        if not self.cfg.use_engine:
            self.opt.step()
        else:
            self.net.step()

    def fit(self, batches):
        while True:
            for a, b in batches:
                out = ((self.net(a) - b) ** 2).mean()
                self._bw(out)
                self._update()
            return


def train(model, optimizer, data, args):
    Runner(model, optimizer, types_ns(args)).fit(data)


def types_ns(args):
    class Cfg:
        use_engine = args.engine
        clip = args.clip
    return Cfg()
"""

FORMS = {"function": FUNCTION, "method": METHOD}


def _gg115(source):
    return [c for c in codes(source) if c == "GG115"]


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 5, generator=g, dtype=torch.float64), torch.randn(6, 1, generator=g, dtype=torch.float64))
            for _ in range(6)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()


def _run(source):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    namespace["train"](model, opt, _data(), types.SimpleNamespace(engine=False, clip=0.05))
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _reference(window: int = 1):
    """Clear, back-propagate the window's micro-batches, clip the whole window's gradient, step."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = _data()
    for start in range(0, len(data), window):
        opt.zero_grad()
        batches = data[start:start + window]  # the last window may be shorter: its own length divides
        for x, y in batches:
            (((model(x) - y) ** 2).mean() / len(batches)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_clip_only_on_the_paths_that_step_every_iteration_is_not_reported(form):
    assert _gg115(FORMS[form]) == []
    # the plain path clips each batch's whole gradient right before its step
    assert torch.allclose(_run(FORMS[form]), _reference(), atol=1e-12)


def test_negative_control_a_flag_the_loop_sets_is_still_reported():
    bad = FUNCTION.replace("    for x, y in data:\n", "    for i, (x, y) in enumerate(data):\n        args.engine = i % 2 == 1\n")
    assert bad != FUNCTION and _gg115(bad) == ["GG115"]


def test_negative_control_the_plain_path_accumulating_is_still_reported():
    # the plain path clears only at the window's end: its clip acts on a partial window
    bad = FUNCTION.replace("        optimizer.zero_grad()\n        loss.backward()\n", "        (loss / 2).backward()\n")
    bad = bad.replace("    for x, y in data:\n", "    for i, (x, y) in enumerate(data):\n")
    bad = bad.replace("        else:\n            optimizer.step()\n",
                      "        elif (i + 1) % 2 == 0:\n            optimizer.step()\n            optimizer.zero_grad()\n")
    assert bad.count("(i + 1) % 2") == 1 and _gg115(bad) == ["GG115"]
    # and it does train elsewhere than clipping the window's whole gradient
    assert not torch.allclose(_run(bad), _reference(window=2), atol=1e-6)


WRAPPER = """\
import torch


class Wrapped:
    def __init__(self, optimizer, params):
        self.optimizer = optimizer
        self.params = list(params)

    def clip_master_grads(self, max_norm):
        # the clip's line is past the last line of train.py


        return torch.nn.utils.clip_grad_norm_(self.params, max_norm)

    def step(self):
        self.optimizer.step()

    def zero_grad(self):
        self.optimizer.zero_grad()
"""

TRAIN = """\
import torch
from wrapper import Wrapped


def train(model, data, accum):
    opt = Wrapped(torch.optim.SGD(model.parameters(), lr=0.1), model.parameters())
    for i, (x, y) in enumerate(data):
        loss = ((model(x) - y) ** 2).mean() / accum
        loss.backward()
        opt.clip_master_grads(1.0)
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
"""


def test_a_clip_in_another_files_method_is_reported_at_this_files_call(tmp_path):
    (tmp_path / "wrapper.py").write_text(WRAPPER)
    (tmp_path / "train.py").write_text(TRAIN)
    found = [f for f in gg.lint_paths([str(tmp_path)], select=["GG115"])]
    assert [(f.code, f.path.endswith("train.py")) for f in found] == [("GG115", True)]
    line = TRAIN.splitlines()[found[0].line - 1]
    assert "opt.clip_master_grads(1.0)" in line
