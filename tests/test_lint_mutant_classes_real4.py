"""Shapes of real code whose mechanical mutants the linter missed (fourth round of public repositories):

* GG104: a loss with a term added by ``loss += reg`` (a proximal or weight regulariser) and then not
  divided by the window; a loss weighted by settings held beside the window's size
  (``args.alpha_ce * loss``, ``kl * args.temperature ** 2``) and not divided;
* GG101: a per-update method (``def update(self, x): ...; loss.backward(); self.optimizer.step()``)
  that never clears, whose object hands its optimizer to a learning-rate scheduler
  (``LambdaLR(self.optimizer, ...)``) and keeps an alias of its model (``self.eval_model = self.model``);
* GG102: a clearing after the backward pass of one branch (``else: loss.backward(); opt.zero_grad()``)
  under a flag the function sets above the loop (``args.fp16 = args.fp16 or args.amp``).

Each buggy program runs in float64 against an independent reference written in plain PyTorch (one step
per window on the window's mean loss; one step per batch for the per-update method). The correct twin
must land on the reference and stay silent; the buggy program must miss it (the negative control) and
be flagged, whatever the names and the form (function, method, helper).
"""

from __future__ import annotations

import re
import types

import pytest
import torch

from _findings import codes

K, MICRO, WINDOWS = 4, 3, 2


def _only(source: str, code: str) -> list:
    return [c for c in codes(source) if c == code]


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1)).double()
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(MICRO, 5, generator=g, dtype=torch.float64), torch.randn(MICRO, 1, generator=g, dtype=torch.float64))
            for _ in range(K * WINDOWS)]
    return model, data


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _settings(**extra):
    return types.SimpleNamespace(accum_steps=K, prox=True, mu=0.01, alpha_ce=0.7, alpha_l1=0.3, temperature=2.0,
                                 fp16=False, amp=False, **extra)


def _run(source: str):
    namespace: dict = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model, data = _setup()
    namespace["train"](model, torch.optim.SGD(model.parameters(), lr=0.1), data, _settings())
    return _params(model)


def _window_reference(loss_of):
    """One plain step per window on ``loss_of(out, y, model)`` of the window's items together."""
    model, data = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for w in range(WINDOWS):
        x = torch.cat([d[0] for d in data[w * K:(w + 1) * K]])
        y = torch.cat([d[1] for d in data[w * K:(w + 1) * K]])
        opt.zero_grad()
        loss_of(model(x), y, model).backward()
        opt.step()
    return _params(model)


def twin(source: str) -> str:
    return "\n".join(line.replace("# FIX: ", "") for line in source.split("\n"))


def _renamed(source: str) -> str:
    """Every user name renamed (attribute names of the settings and method calls such as ``.step()`` kept)."""
    for old, new in (("loss", "objective_value"), ("model", "network"), ("opt", "o"), ("optimizer", "upd"), ("step", "it"),
                     ("args", "cfg"), ("reg", "penalty"), ("Runner", "Worker"), ("Trainer", "Learner"), ("update", "learn"),
                     ("regulariser", "extra_term"), ("out", "pred_")):
        source = re.sub(r"(?<![.\w])%s\b" % old, new, source)
    return source


def _unrelated(source: str) -> str:
    """A log helper and a `reduction="sum"` loss object nothing here calls."""
    return source + ('\n\ndef summed_criterion():\n    return torch.nn.MSELoss(reduction="sum")\n'
                     "\n\ndef log(value):\n    print(float(value))\n")


# --- GG104: a term added by `+=`, then the sum back-propagated undivided -----------------------------

ADDED_TERM = """\
import torch


def train(model, opt, data, args):
    for step, (x, y) in enumerate(data):
        loss = torch.nn.functional.mse_loss(model(x), y)
        if args.prox:
            reg = 0.0
            for p in model.parameters():
                reg += (args.mu / 2) * (p ** 2).sum()
            loss += reg
        # FIX: loss = loss / args.accum_steps
        loss.backward()
        if (step + 1) % args.accum_steps == 0:
            opt.step()
            opt.zero_grad()
"""

# the regulariser from a helper, the loop in a method of a class that holds its settings
ADDED_TERM_METHOD = """\
import torch


def regulariser(net, mu):
    total = 0.0
    for p in net.parameters():
        total += (mu / 2) * (p ** 2).sum()
    return total


class Runner:
    def __init__(self, net, optimizer, args):
        self.net, self.optimizer, self.args = net, optimizer, args

    def fit(self, batches):
        for i, (x, y) in enumerate(batches):
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            loss += regulariser(self.net, self.args.mu)
            loss = loss.mean()
            # FIX: loss = loss / self.args.accum_steps
            loss.backward()
            if (i + 1) % self.args.accum_steps == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()


def train(model, opt, data, args):
    Runner(model, opt, args).fit(data)
"""


def _mse_plus_reg(out, y, model):
    return torch.nn.functional.mse_loss(out, y) + sum((0.01 / 2) * (p ** 2).sum() for p in model.parameters())


# --- GG104: weights that are settings beside the window's size --------------------------------------

SIBLING_WEIGHTS = """\
import torch


def train(model, opt, data, args):
    for step, (x, y) in enumerate(data):
        out = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        soft = (out - y).abs().mean() * (args.temperature ** 2)
        loss = args.alpha_l1 * soft + args.alpha_ce * loss
        # FIX: loss = loss / args.accum_steps
        loss.backward()
        if (step + 1) % args.accum_steps == 0:
            opt.step()
            opt.zero_grad()
"""


def _weighted(out, y, model):
    return 0.7 * torch.nn.functional.mse_loss(out, y) + 0.3 * (out - y).abs().mean() * 4.0


GG104_PROGRAMS = {"added_term": (ADDED_TERM, _mse_plus_reg), "added_term_method": (ADDED_TERM_METHOD, _mse_plus_reg),
                  "sibling_weights": (SIBLING_WEIGHTS, _weighted)}


@pytest.mark.parametrize("name", sorted(GG104_PROGRAMS))
def test_gg104_the_undivided_window_is_flagged_and_wrong_its_twin_silent_and_exact(name):
    source, loss_of = GG104_PROGRAMS[name]
    assert _only(source, "GG104") == ["GG104"]
    assert _only(twin(source), "GG104") == []
    reference = _window_reference(loss_of)
    assert torch.allclose(_run(twin(source)), reference, rtol=0, atol=1e-12)
    assert not torch.allclose(_run(source), reference, atol=1e-4)  # negative control: K times the mean


@pytest.mark.parametrize("rewrite", [_renamed, _unrelated], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", sorted(GG104_PROGRAMS))
def test_gg104_rewrites_that_keep_the_computation_keep_the_verdict(name, rewrite):
    source = rewrite(GG104_PROGRAMS[name][0])
    assert _only(source, "GG104") == ["GG104"]
    assert _only(twin(source), "GG104") == []


def test_gg104_a_weight_the_file_computes_from_the_window_is_its_divisor():
    """``args.inv = 1 / args.accum_steps`` then ``loss * args.inv``: a setting the file assigns is not
    taken for a user's weight, and this program is right (silent and exact)."""
    source = SIBLING_WEIGHTS.replace("def train(model, opt, data, args):\n",
                                     "def train(model, opt, data, args):\n    args.inv = 1 / args.accum_steps\n")
    source = source.replace("        # FIX: loss = loss / args.accum_steps\n", "        loss = loss * args.inv\n")
    assert _only(source, "GG104") == []
    assert torch.allclose(_run(source), _window_reference(_weighted), rtol=0, atol=1e-12)


def test_gg104_a_term_added_before_the_division_is_divided_with_the_loss():
    """``loss += reg`` then ``loss = loss / K``: the division reads the sum (silent and exact)."""
    source = ADDED_TERM.replace("        # FIX: loss = loss / args.accum_steps\n", "        loss = loss / args.accum_steps\n")
    assert _only(source, "GG104") == []
    assert torch.allclose(_run(source), _window_reference(_mse_plus_reg), rtol=0, atol=1e-12)


# --- GG101: a per-update method whose object hands its optimizer to an LR scheduler -----------------

PER_UPDATE = """\
import torch
from torch.optim.lr_scheduler import LambdaLR


class Trainer:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.scheduler = LambdaLR(self.optimizer, lr_lambda=lambda s: 1.0)
        self.eval_model = self.model

    def update(self, x, y):
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        # FIX: self.optimizer.zero_grad()
        self.scheduler.step()
        return loss.item()
"""

# the loop that calls the update is in another file (a framework's, or the project's script): linted
# alone, the method is the whole update; this driver only runs it
DRIVER = """

def train(model, opt, data, args):
    trainer = Trainer(model, 0.1)
    for x, y in data:
        trainer.update(x, y)
"""


def _per_batch_reference():
    model, data = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return _params(model)


PER_UPDATE_FORMS = {
    "imported_scheduler": PER_UPDATE,
    "qualified_scheduler": PER_UPDATE.replace("LambdaLR(self.optimizer", "torch.optim.lr_scheduler.LambdaLR(self.optimizer")
                                     .replace("from torch.optim.lr_scheduler import LambdaLR\n", ""),
}


@pytest.mark.parametrize("form", sorted(PER_UPDATE_FORMS))
def test_gg101_a_per_update_method_that_never_clears_is_flagged_and_wrong(form):
    source = PER_UPDATE_FORMS[form]
    assert _only(source, "GG101") == ["GG101"]
    assert _only(twin(source), "GG101") == []
    reference = _per_batch_reference()
    assert torch.allclose(_run(twin(source) + DRIVER), reference, rtol=0, atol=1e-12)
    assert not torch.allclose(_run(source + DRIVER), reference, atol=1e-4)  # negative control: stale gradients summed


@pytest.mark.parametrize("rewrite", [_renamed, _unrelated], ids=lambda f: f.__name__)
def test_gg101_per_update_rewrites_keep_the_verdict(rewrite):
    source = rewrite(PER_UPDATE)
    assert _only(source, "GG101") == ["GG101"]
    assert _only(twin(source), "GG101") == []


def test_gg101_an_optimizer_handed_to_unknown_code_stays_unread():
    """The object hands its optimizer to code of unknown effect (``register(self.optimizer)``), which may
    clear it: no finding (the scheduler alone is known not to clear)."""
    source = PER_UPDATE.replace("        self.eval_model = self.model\n",
                                "        self.eval_model = self.model\n        register(self.optimizer)\n")
    assert _only(source, "GG101") == []


# --- GG102: a flag the function sets above the loop is fixed for the loop -----------------------------

FLAG_SET_ABOVE = """\
import torch


def train(model, optimizer, data, args):
    args.fp16 = args.fp16 or args.amp
    for step, (x, y) in enumerate(data):
        loss = torch.nn.functional.mse_loss(model(x), y) / args.accum_steps
        if args.fp16:
            args.scaler.scale(loss).backward()
        else:
            loss.backward()
            optimizer.zero_grad()
        if (step + 1) % args.accum_steps == 0:
            optimizer.step()
"""

FLAG_SET_ABOVE_FIXED = FLAG_SET_ABOVE.replace("            optimizer.zero_grad()\n", "").replace(
    "            optimizer.step()\n", "            optimizer.step()\n            optimizer.zero_grad()\n")


def test_gg102_a_clearing_after_the_pass_under_a_flag_set_above_the_loop():
    assert _only(FLAG_SET_ABOVE, "GG102") == ["GG102"]
    assert _only(FLAG_SET_ABOVE_FIXED, "GG102") == []
    reference = _window_reference(lambda out, y, model: torch.nn.functional.mse_loss(out, y))
    assert torch.allclose(_run(FLAG_SET_ABOVE_FIXED), reference, rtol=0, atol=1e-12)
    assert not torch.allclose(_run(FLAG_SET_ABOVE), reference, atol=1e-4)  # negative control: the last micro-batch only


@pytest.mark.parametrize("rewrite", [_renamed, _unrelated], ids=lambda f: f.__name__)
def test_gg102_flag_set_above_rewrites_keep_the_verdict(rewrite):
    assert _only(rewrite(FLAG_SET_ABOVE), "GG102") == ["GG102"]
    assert _only(rewrite(FLAG_SET_ABOVE_FIXED), "GG102") == []


def test_gg102_an_optimizer_that_back_propagates_in_the_other_branch():
    """The real shape: apex's ``optimizer.backward(loss)`` in the fp16 branch."""
    source = FLAG_SET_ABOVE.replace("args.scaler.scale(loss).backward()", "optimizer.backward(loss)")
    fixed = FLAG_SET_ABOVE_FIXED.replace("args.scaler.scale(loss).backward()", "optimizer.backward(loss)")
    assert _only(source, "GG102") == ["GG102"]
    assert _only(fixed, "GG102") == []


def test_gg102_a_flag_changed_inside_the_loop_still_varies():
    """The flag written inside the loop too (``args.fp16 = step > 3``) may differ between micro-batches:
    the branches are not one loop each, and nothing is claimed."""
    source = FLAG_SET_ABOVE.replace("        loss = torch", "        args.fp16 = step > 3\n        loss = torch")
    assert _only(source, "GG102") == []


# --- GG104 stays silent on gradient caching -------------------------------------------------------------

# open_clip's `accum_freq`: the window's outputs kept under no_grad, then one pass per micro-batch on the
# whole window's loss with that micro-batch's part live; the passes add up the window's gradient once
GRADIENT_CACHE = """\
import torch


def window_loss(model, x, ys, cached, j):
    outs = torch.cat(cached[:j] + [model(x)] + cached[j + 1:])
    return torch.nn.functional.mse_loss(outs, torch.cat(ys))


def train(model, opt, data, args):
    cached, inputs, targets = [], [], []
    for i, (x, y) in enumerate(data):
        with torch.no_grad():
            cached.append(model(x))
            inputs.append(x)
            targets.append(y)
        if (i + 1) % args.accum_steps > 0:
            continue
        opt.zero_grad()
        for j in range(args.accum_steps):
            loss = window_loss(model, inputs[j], targets, cached, j)
            loss += 0.0 * sum(p.sum() for p in model.parameters())
            loss.backward()
        opt.step()
        cached, inputs, targets = [], [], []
"""


def test_gg104_gradient_caching_adds_one_window_gradient_and_is_silent():
    assert _only(GRADIENT_CACHE, "GG104") == []
    reference = _window_reference(lambda out, y, model: torch.nn.functional.mse_loss(out, y))
    assert torch.allclose(_run(GRADIENT_CACHE), reference, rtol=0, atol=1e-12)
    # negative control: the same passes divided by K would apply a K-th of it
    divided = GRADIENT_CACHE.replace("            loss.backward()", "            (loss / args.accum_steps).backward()")
    assert not torch.allclose(_run(divided), reference, atol=1e-4)


# --- GG104 stays silent where the object that back-propagates holds the window's size ---------------------

# Accelerate's `backward` divides the loss by the accelerator's gradient_accumulation_steps (outside
# `accumulate()` too): a micro-step loop of that many passes is divided once already
ACCELERATOR_OWN_SIZE = """\
import torch


def train(model, opt, data, args):
    from accelerate import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=args.accum_steps, cpu=True)
    stream = iter(data)
    for _ in range(len(data) // args.accum_steps):
        for i in range(accelerator.gradient_accumulation_steps):
            x, y = next(stream)
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
"""


def test_gg104_an_accelerator_dividing_by_its_own_window_is_silent_and_exact():
    pytest.importorskip("accelerate")
    assert _only(ACCELERATOR_OWN_SIZE, "GG104") == []
    reference = _window_reference(lambda out, y, model: torch.nn.functional.mse_loss(out, y))
    assert torch.allclose(_run(ACCELERATOR_OWN_SIZE), reference, rtol=0, atol=1e-12)
    # negative control: the plain pass, same loop, applies K times the window's mean gradient and is flagged
    plain = ACCELERATOR_OWN_SIZE.replace("accelerator.backward(loss)", "loss.backward()")
    assert _only(plain, "GG104") == ["GG104"]
    assert not torch.allclose(_run(plain), reference, atol=1e-4)
