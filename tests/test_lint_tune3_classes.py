"""False findings of the second fresh list's tune half, as classes: each a correct program and its buggy twin,
in more than one form (renamed, in a helper, as a method). The verdict follows what the program computes; where
it is numeric, the program is run in float64 against plain PyTorch.
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg


def _lines(source, code):
    return [f.line for f in gg.lint_source(source) if f.code == code]


# ---------------------------------------------------------------------------------------------
# GG101: a recorder that runs the backward pass for the loss it is handed (NVIDIA Warp's
# `tape.backward(loss)`) and zeroes what it wrote (`tape.zero()`, `tape.reset()`)

TAPE_FORMS = {
    "loop": '''\
from recorder import Tape


def train(batches, model, opt):
    for x, y in batches:
        tape = Tape(model)
        loss = ((model(x) - y) ** 2).mean()
        tape.backward(loss)
        opt.step()
        tape.zero()
''',
    "renamed, keyword loss, reset": '''\
from recorder import Tape


def fit(data, net, o):
    for a, b in data:
        rec = Tape(net)
        objective = ((net(a) - b) ** 2).mean()
        rec.backward(loss=objective)
        o.step()
        rec.reset()
''',
    "helper": '''\
from recorder import Tape


def _update(tape, opt, loss):
    tape.backward(loss)
    opt.step()
    tape.zero()


def train(batches, model, opt):
    for x, y in batches:
        _update(Tape(model), opt, ((model(x) - y) ** 2).mean())
''',
    "method": '''\
from recorder import Tape


class Agent:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def train(self, batches):
        for x, y in batches:
            self.tape = Tape(self.model)
            loss = ((self.model(x) - y) ** 2).mean()
            self.tape.backward(loss)
            self.opt.step()
            self.tape.zero()
''',
}


class _Tape:
    """A recorder in plain PyTorch standing in for Warp's tape: runs the pass, zeroes what it wrote."""

    def __init__(self, model):
        self.params = list(model.parameters())

    def backward(self, loss=None):
        loss.backward()

    def zero(self):
        for p in self.params:
            p.grad = None

    reset = zero


def _train(source, form):
    """The program run on three batches, and plain PyTorch's clear-backward-step on the same batches."""
    import sys
    import types

    data = [(torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)) for _ in range(3)]
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sys.modules["recorder"] = types.SimpleNamespace(Tape=_Tape)
    try:
        scope: dict = {}
        exec(compile(source, "<test>", "exec"), scope)
        if form == "method":
            scope["Agent"](model, opt).train(data)
        else:
            (scope.get("train") or scope["fit"])(data, model, opt)
    finally:
        del sys.modules["recorder"]
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for x, y in data:
        ref_opt.zero_grad()
        ((ref(x) - y) ** 2).mean().backward()
        ref_opt.step()
    return model, ref


@pytest.mark.parametrize("form", sorted(TAPE_FORMS))
def test_gg101_silent_when_the_recorder_that_ran_the_pass_zeroes_it(form):
    source = TAPE_FORMS[form]
    assert _lines(source, "GG101") == []
    model, ref = _train(source, form)
    # the program applies each batch's own gradient: the same weights as plain PyTorch
    assert torch.allclose(model.weight, ref.weight) and torch.allclose(model.bias, ref.bias)


@pytest.mark.parametrize("form", sorted(TAPE_FORMS))
def test_gg101_still_found_without_the_recorders_zero(form):
    source = "\n".join(line for line in TAPE_FORMS[form].splitlines() if ".zero()" not in line and ".reset()" not in line) + "\n"
    assert len(_lines(source, "GG101")) == 1
    model, ref = _train(source, form)
    assert not torch.allclose(model.weight, ref.weight)  # the stale gradients were applied again


def test_gg101_a_zero_of_another_object_is_no_clearing():
    source = TAPE_FORMS["loop"].replace("tape.zero()", "counter.zero()").replace("(batches, model, opt)", "(batches, model, opt, counter)")
    assert len(_lines(source, "GG101")) == 1


# ---------------------------------------------------------------------------------------------
# GG201: an evaluation loop nested in the epoch loop of a training loop, whose outputs are computed
# under `torch.no_grad()` right above the sum (the training loop binds the same name with a graph)

EVAL_FORMS = {
    "nested": '''\
import torch


def train(model, opt, train_data, val_data, epochs):
    for epoch in range(epochs):
        for x, y in train_data:
            outputs = model(x, y)
            outputs.loss.backward()
            opt.step()
            opt.zero_grad()
        val_logs = {"val_loss": 0, "val_num": 0}
        for x, y in val_data:
            with torch.no_grad():
                outputs = model(x, y)
            val_logs["val_loss"] += outputs.loss
            val_logs["val_num"] += 1
    return val_logs
''',
    "renamed, inference_mode": '''\
import torch


def fit(net, o, tr, va, n_ep):
    for ep in range(n_ep):
        for a, b in tr:
            res = net(a, b)
            res.loss.backward()
            o.step()
            o.zero_grad()
        meter = {"l": 0}
        for a, b in va:
            with torch.inference_mode():
                res = net(a, b)
            meter["l"] += res.loss
    return meter
''',
    "method": '''\
import torch


class Runner:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def train(self, train_data, val_data, epochs):
        for epoch in range(epochs):
            for x, y in train_data:
                outputs = self.model(x, y)
                outputs.loss.backward()
                self.opt.step()
                self.opt.zero_grad()
            self.val_logs = {"val_loss": 0}
            for x, y in val_data:
                with torch.no_grad():
                    outputs = self.model(x, y)
                self.val_logs["val_loss"] += outputs.loss
        return self.val_logs
''',
}


class _Out:
    def __init__(self, loss):
        self.loss = loss


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1).double()

    def forward(self, x, y):
        return _Out(((self.lin(x) - y) ** 2).mean())


def _eval_total(source, form):
    torch.manual_seed(0)
    model = _Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)) for _ in range(2)]
    scope: dict = {}
    exec(compile(source, "<test>", "exec"), scope)
    if form == "method":
        logs = scope["Runner"](model, opt).train(data, data, 2)
    else:
        logs = (scope.get("train") or scope["fit"])(model, opt, data, data, 2)
    return next(iter(logs.values()))


def _without_no_grad(source):
    lines = source.splitlines()
    out = []
    for i, line in enumerate(lines):
        if "torch.no_grad()" in line or "torch.inference_mode()" in line:
            continue
        if i and ("torch.no_grad()" in lines[i - 1] or "torch.inference_mode()" in lines[i - 1]):
            line = line[4:]
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("form", sorted(EVAL_FORMS))
def test_gg201_silent_on_a_nested_evaluation_under_no_grad(form):
    source = EVAL_FORMS[form]
    assert _lines(source, "GG201") == []
    assert _eval_total(source, form).grad_fn is None  # what the sum holds has no graph


@pytest.mark.parametrize("form", sorted(EVAL_FORMS))
def test_gg201_still_found_on_the_nested_evaluation_without_no_grad(form):
    source = _without_no_grad(EVAL_FORMS[form])
    assert "no_grad" not in source and "inference_mode" not in source
    assert len(_lines(source, "GG201")) == 1
    assert _eval_total(source, form).grad_fn is not None  # the sum links every batch's graph


# ---------------------------------------------------------------------------------------------
# GG104: the loss divided through the attribute that holds it (`result.loss /= K`, then
# `result.loss.backward()`), in place or by assignment

ATTR_FORMS = {
    "in place": '''\
def train(task, opt, batches, K):
    n = 0
    for batch in batches:
        result = task(batch)
        result.loss /= K
        result.loss.backward()
        n += 1
        if n == K:
            opt.step()
            opt.zero_grad()
            n = 0
''',
    "renamed, assigned": '''\
def fit(model, o, data, accum):
    seen = 0
    for item in data:
        out = model(item)
        out.loss = out.loss / accum
        out.loss.backward()
        seen += 1
        if seen == accum:
            o.step()
            o.zero_grad()
            seen = 0
''',
    "method": '''\
class Runner:
    def __init__(self, opt, K):
        self.opt, self.K = opt, K

    def train(self, task, batches):
        n = 0
        for batch in batches:
            result = task(batch)
            result.loss /= self.K
            result.loss.backward()
            n += 1
            if n == self.K:
                self.opt.step()
                self.opt.zero_grad()
                n = 0
''',
}


class _Task(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1).double()

    def forward(self, batch):
        x, y = batch
        return _Out(((self.lin(x) - y) ** 2).mean())


def _first_step_gradient(source, form):
    """The gradient the first step applies, and the full-batch mean gradient of its window, in float64."""
    torch.manual_seed(0)
    task = _Task()
    K = 2
    batches = [(torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)) for _ in range(K)]
    seen = []

    class _Probe(torch.optim.SGD):
        def step(self, closure=None):
            seen.append(task.lin.weight.grad.clone())
            return super().step(closure)

    opt = _Probe(task.parameters(), lr=0.0)
    scope: dict = {}
    exec(compile(source, "<test>", "exec"), scope)
    if form == "method":
        scope["Runner"](opt, K).train(task, batches)
    else:
        (scope.get("train") or scope["fit"])(task, opt, batches, K)
    task.zero_grad()
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    ((task.lin(x) - y) ** 2).mean().backward()
    return seen[0], task.lin.weight.grad


@pytest.mark.parametrize("form", sorted(ATTR_FORMS))
def test_gg104_silent_when_the_attribute_holding_the_loss_is_divided(form):
    source = ATTR_FORMS[form]
    assert _lines(source, "GG104") == []
    applied, reference = _first_step_gradient(source, form)
    assert torch.allclose(applied, reference)


@pytest.mark.parametrize("form", sorted(ATTR_FORMS))
def test_gg104_still_found_without_the_division(form):
    source = "\n".join(l for l in ATTR_FORMS[form].splitlines() if "/= " not in l and " / accum" not in l) + "\n"
    assert len(_lines(source, "GG104")) == 1
    applied, reference = _first_step_gradient(source, form)
    assert torch.allclose(applied, 2 * reference)  # K = 2 means summed: twice the mean gradient



# ---------------------------------------------------------------------------------------------
# GG112: the unscale under the same flag that scaled the pass, where the flag is also tested above the
# loop in the same function (`if amp: scaler = GradScaler()`): the flag keeps its value across the
# loop's iterations, so a window scaled on one iteration is unscaled on the one that closes it.
# (The shape is a speech toolkit's runner reduced, statement by statement, to what decides the verdict.)

GG112_FORMS = {
    "runner": 'class Runner:\n\n    def train(self):\n        if amp:\n            pass\n        if self.config.get(\'scheduler\'):\n            pass\n        if self.config.get(\'specaug\'):\n            pass\n        if init_step:\n            pass\n        if is_leader_process():\n            pass\n        while pbar.n < pbar.total:\n            try:\n                pass\n            except TypeError as e:\n                if "unexpected keyword argument \'epoch\'" in str(e):\n                    if hasattr(dataloader, \'sampler\') and isinstance(dataloader.sampler, DistributedSampler):\n                        pass\n                else:\n                    raise\n            for batch_id, (wavs, *others) in enumerate(tqdm(dataloader, dynamic_ncols=True, desc=\'train\', file=tqdm_file)):\n                try:\n                    gradient_accumulate_steps = self.config[\'runner\'].get(\'gradient_accumulate_steps\')\n                    if amp:\n                        scaler.scale(loss).backward()\n                except RuntimeError as e:\n                    pass\n                if backward_steps % gradient_accumulate_steps > 0:\n                    continue\n                if amp:\n                    scaler.unscale_(optimizer)\n                grad_norm = torch.nn.utils.clip_grad_norm_(trainable_paras, self.config[\'runner\'][\'gradient_clipping\'])',
    "renamed": 'class Runner:\n\n    def train(self):\n        if use_fp16:\n            pass\n        if self.config.get(\'scheduler\'):\n            pass\n        if self.config.get(\'specaug\'):\n            pass\n        if init_step:\n            pass\n        if is_leader_process():\n            pass\n        while pbar.n < pbar.total:\n            try:\n                pass\n            except TypeError as e:\n                if "unexpected keyword argument \'epoch\'" in str(e):\n                    if hasattr(dataloader, \'suse_fp16ler\') and isinstance(dataloader.suse_fp16ler, DistributedSuse_fp16ler):\n                        pass\n                else:\n                    raise\n            for batch_id, (wavs, *others) in enumerate(tqdm(dataloader, dynamic_ncols=True, desc=\'train\', file=tqdm_file)):\n                try:\n                    accum = self.config[\'runner\'].get(\'accum\')\n                    if use_fp16:\n                        gs.scale(loss).backward()\n                except RuntimeError as e:\n                    pass\n                if n_back % accum > 0:\n                    continue\n                if use_fp16:\n                    gs.unscale_(o)\n                grad_norm = torch.nn.utils.clip_grad_norm_(params, self.config[\'runner\'][\'gradient_clipping\'])',
}


@pytest.mark.parametrize("form", sorted(GG112_FORMS))
def test_gg112_silent_when_the_unscale_shares_the_flag_tested_above_the_loop(form):
    assert _lines(GG112_FORMS[form], "GG112") == []


@pytest.mark.parametrize("form", sorted(GG112_FORMS))
def test_gg112_still_found_when_the_unscale_waits_for_another_flag(form):
    source = GG112_FORMS[form]
    flag, rest = ("amp", "scaler.unscale_(optimizer)") if form == "runner" else ("use_fp16", "gs.unscale_(o)")
    bad = source.replace(f"if {flag}:\n                    {rest}", f"if log_norms:\n                    {rest}")
    assert bad != source
    assert len(_lines(bad, "GG112")) == 1


# ---------------------------------------------------------------------------------------------
# Missed GG101: ignite's `Engine(update)` whose update function is defined in the script's
# `if __name__ == "__main__":` block (no clearing: every step re-applies earlier gradients)

IGNITE_FORMS = {
    "main block": '''\
import torch
from ignite.engine import Engine

if __name__ == "__main__":
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def process_batch(trainer, batch):
        %s
        loss = net(batch).mean()
        loss.backward()
        opt.step()
        return loss.item()

    engine = Engine(process_batch)
    engine.run(data=[torch.randn(3, 2)])
''',
    "renamed, nested if": '''\
import torch
from ignite.engine import Engine

RUN = True
if __name__ == "__main__":
    if RUN:
        model = torch.nn.Linear(2, 1)
        o = torch.optim.Adam(model.parameters())

        def upd(e, b):
            %s
            l = model(b).mean()
            l.backward()
            o.step()

        Engine(upd).run([torch.randn(3, 2)])
''',
}


@pytest.mark.parametrize("form", sorted(IGNITE_FORMS))
def test_gg101_found_in_an_ignite_update_defined_in_the_main_block(form):
    assert len(_lines(IGNITE_FORMS[form] % "pass", "GG101")) == 1


@pytest.mark.parametrize("form", sorted(IGNITE_FORMS))
def test_gg101_silent_when_that_update_clears(form):
    opt = "opt" if form == "main block" else "o"
    assert _lines(IGNITE_FORMS[form] % f"{opt}.zero_grad()", "GG101") == []


# ---------------------------------------------------------------------------------------------
# Missed GG201: an epoch total of loss tensors, whose mean is then bound to the name the batch loop
# back-propagates (`loss = total_loss / n` after the loop, for the log): that later binding is no
# pass of the total (the meta-learning form, `meta = total / n; meta.backward()`, stays silent)

EPOCH_TOTAL_FORMS = {
    "function": '''\
import torch.nn.functional as F


def train(model, optimizer, loader, n, epochs):
    for epoch in range(epochs):
        total_loss = 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total_loss += %s * x.shape[0]
        loss = total_loss / n
    return total_loss
''',
    "renamed, method": '''\
import torch.nn.functional as F


class Fit:
    def run(self, net, o, data, count, n_ep):
        for ep in range(n_ep):
            acc = 0
            for a, b in data:
                o.zero_grad()
                obj = F.mse_loss(net(a), b)
                obj.backward()
                o.step()
                acc += %s * a.shape[0]
            obj = acc / count
            print(obj)
        return acc
''',
}


def _epoch_total(source, form):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)) for _ in range(2)]
    scope: dict = {}
    exec(compile(source, "<test>", "exec"), scope)
    if form == "function":
        return scope["train"](model, opt, data, 8, 2)
    return scope["Fit"]().run(model, opt, data, 8, 2)


@pytest.mark.parametrize("form", sorted(EPOCH_TOTAL_FORMS))
def test_gg201_found_on_an_epoch_total_whose_mean_reuses_the_loss_name(form):
    loss = "loss" if form == "function" else "obj"
    source = EPOCH_TOTAL_FORMS[form] % loss
    assert len(_lines(source, "GG201")) == 1
    assert _epoch_total(source, form).grad_fn is not None  # the total links every batch's graph


@pytest.mark.parametrize("form", sorted(EPOCH_TOTAL_FORMS))
def test_gg201_silent_when_that_total_adds_numbers(form):
    loss = "loss" if form == "function" else "obj"
    source = EPOCH_TOTAL_FORMS[form] % f"{loss}.item()"
    assert _lines(source, "GG201") == []
    assert isinstance(_epoch_total(source, form), float)


def test_gg201_a_total_back_propagated_after_it_is_divided_stays_silent():
    source = '''\
def outer(model, meta_opt, tasks):
    for epoch in range(3):
        total = 0
        for x, y in tasks:
            loss = ((model(x) - y) ** 2).mean()
            total += loss
        meta = total / len(tasks)
        meta_opt.zero_grad()
        meta.backward()
        meta_opt.step()
'''
    assert _lines(source, "GG201") == []


# ---------------------------------------------------------------------------------------------
# GG201: a list set back at the top of each update, filled by its micro-step loop and summed for the log
# (an image-classification trainer's subdivided batch): one update's graphs at most, no leak; the same
# list set back only at each epoch's start over a batch loop that steps (in a helper too) is still one

PER_UPDATE = '''\
import torch


def train(model, optimizer, loader, loss_func, chunks):
    for data, targets in loader:
        optimizer.zero_grad()
        losses = []
        for x, y in zip(data.chunk(chunks), targets.chunk(chunks)):
            loss = loss_func(model(x), y) / chunks
            losses.append(loss)
            loss.backward()
        optimizer.step()
        loss = sum(losses)
        print(loss.item())
'''

PER_EPOCH = '''\
import torch


def _update(optimizer):
    optimizer.step()
    optimizer.zero_grad()


def train(model, optimizer, loader, loss_func, epochs):
    for epoch in range(epochs):
        losses = []
        for x, y in loader:
            loss = loss_func(model(x), y)
            losses.append(loss)
            loss.backward()
            _update(optimizer)
        loss = sum(losses)
        print(loss.item())
'''


def test_gg201_silent_on_a_list_set_back_at_each_update():
    assert _lines(PER_UPDATE, "GG201") == []
    renamed = PER_UPDATE.replace("losses", "parts").replace("loss", "term")
    assert _lines(renamed, "GG201") == []


def test_gg201_found_on_a_list_set_back_only_at_each_epoch():
    assert len(_lines(PER_EPOCH, "GG201")) == 1


def test_gg201_found_when_the_per_update_list_is_handed_to_a_meter():
    source = PER_UPDATE.replace("        loss = sum(losses)\n        print(loss.item())\n",
                                "        meter.update(sum(losses))\n").replace("chunks):", "chunks, meter):", 1)
    assert "meter.update" in source
    assert len(_lines(source, "GG201")) == 1


def test_gg201_found_when_the_per_update_total_is_added_into_a_longer_total():
    source = PER_UPDATE.replace("        loss = sum(losses)\n        print(loss.item())\n",
                                "        window_total += sum(losses)\n").replace(
        "    for data, targets in loader:\n", "    window_total = 0\n    for data, targets in loader:\n")
    assert "window_total += sum(losses)" in source
    assert len(_lines(source, "GG201")) >= 1
