"""One optimizer stepped twice on one backward pass (torchvision's AMP branch: ``scaler.step(optimizer)``,
then, outside the branch, a clip and ``optimizer.step()`` again): the second step applies the very gradient
the first one applied. Both tools report GG101 at that second step; a clip in between (which rescales the
spent gradient in place) is no clearing.

Oracle: plain PyTorch in float64, one clipped SGD-with-momentum step per batch. A program the tools report
must differ from it; the fixed forms must match it. Forms: inline, the AMP step in a helper function, a
method of a trainer; negative controls: the fixed loop (clip and step in each branch), and two optimizers
over different modules stepped one after the other.
"""

import textwrap

import pytest
import torch

import gradguard as gg

PRELUDE = """
import torch
import torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scaler = torch.amp.GradScaler("cpu")
criterion = nn.CrossEntropyLoss()
g = torch.Generator().manual_seed(2)
data = [(3 * torch.randn(16, 8, generator=g, dtype=torch.float64), torch.randint(0, 3, (16,), generator=g)) for _ in range(4)]
amp = True
"""

# name -> (GG101 expected, program after the prelude)
PROGRAMS = {
    "inline": (True, """
for x, y in data:
    optimizer.zero_grad()
    if amp:
        scaler.scale(criterion(model(x), y)).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        criterion(model(x), y).backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
"""),
    "helper_function": (True, """
def scaled_update(loss, opt):
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()

for inputs, labels in data:
    optimizer.zero_grad()
    scaled_update(criterion(model(inputs), labels), optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
"""),
    "trainer_method": (True, """
class Trainer:
    def __init__(self, net, opt):
        self.net, self.opt = net, opt

    def one_batch(self, x, y):
        self.opt.zero_grad()
        scaler.scale(criterion(self.net(x), y)).backward()
        scaler.step(self.opt)
        scaler.update()
        self.opt.step()

trainer = Trainer(model, optimizer)
for x, y in data:
    trainer.one_batch(x, y)
"""),
    "fixed": (False, """
for x, y in data:
    optimizer.zero_grad()
    if amp:
        scaler.scale(criterion(model(x), y)).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    else:
        criterion(model(x), y).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
"""),
}


def _reference(clip: bool = True) -> list:
    """Plain PyTorch: one SGD-with-momentum step per batch on the clipped gradient of that batch."""
    ns: dict = {}
    exec(PRELUDE, ns)
    model, data = ns["model"], ns["data"]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _gap(a, b) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def _source(body: str) -> str:
    return PRELUDE + textwrap.dedent(body)


def _watched(body: str):
    ns: dict = {}
    with gg.watch(mode="record") as w:
        exec(compile(_source(body), "<twice>", "exec"), ns)
    return list(w.findings), [p.detach().clone() for p in ns["model"].parameters()]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_form_against_one_clipped_step_per_batch(name):
    reported, body = PROGRAMS[name]
    findings, params = _watched(body)
    codes = [f.code for f in gg.lint_source(_source(body), "train.py")]
    gap = _gap(params, _reference())
    if reported:
        assert gap > 1e-3, f"{name}: two steps per batch must change the updates"
        first = [f.step for f in findings if f.code == "GG101"]
        # the optimizer's second step (the first one of the first batch is right) is the first one changed
        assert first and min(first) == 2, (name, [(f.code, f.step) for f in findings])
        assert "GG101" in codes, (name, codes)
    else:
        assert gap < 1e-10, f"{name}: the fixed loop must apply one clipped step per batch"
        assert findings == [] and codes == [], (name, [f.code for f in findings], codes)


def test_two_optimizers_over_different_modules_are_not_one_stepped_twice():
    body = """
head = nn.Linear(3, 3).double()
opt_head = torch.optim.SGD(head.parameters(), lr=0.1)
for x, y in data:
    optimizer.zero_grad()
    opt_head.zero_grad()
    criterion(head(model(x)), y).backward()
    optimizer.step()
    opt_head.step()
"""
    findings, _ = _watched(body)
    assert [f.code for f in findings] == []
    assert [f.code for f in gg.lint_source(_source(body), "train.py")] == []


def test_a_clearing_by_hand_after_the_step_is_still_a_clearing():
    # the tracker's new reading (a spent gradient rescaled in place stays spent) must not make a zero_() stale
    body = """
for x, y in data:
    criterion(model(x), y).backward()
    optimizer.step()
    for p in model.parameters():
        p.grad.zero_()
"""
    findings, params = _watched(body)
    assert [f.code for f in findings] == []
    assert _gap(params, _reference(clip=False)) < 1e-10


def test_raise_mode_stops_at_the_second_step_with_gg101_not_at_the_clip():
    # the clip between the two steps rescales what the first step applied and the second applies again:
    # GG101 at that step, not GG116 at the clip (whose "the next step applies only later passes" is false here)
    ns: dict = {}
    with pytest.raises(gg.GradientBugError, match="GG101"):
        with gg.watch(mode="raise"):
            exec(compile(_source(PROGRAMS["inline"][1]), "<twice>", "exec"), ns)


def test_a_clip_after_the_step_then_a_pass_is_still_gg116_at_step_1():
    body = """
for x, y in data:
    optimizer.zero_grad()
    criterion(model(x), y).backward()
    optimizer.step()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
"""
    findings, _ = _watched(body)
    assert [(f.code, f.step) for f in findings] == [("GG116", 1)]


def test_a_step_that_names_the_part_it_steps_is_not_one_stepped_twice():
    # (StarGANv2-VC's MultiOptimizer: `optimizer.step("generator")` then `optimizer.step("style_encoder")`
    # step two sub-optimizers, one each, on the same backward pass)
    body = """
class Multi:
    def __init__(self, parts):
        self.parts = parts

    def zero_grad(self):
        for o in self.parts.values():
            o.zero_grad()

    def step(self, key):
        self.parts[key].step()

head = nn.Linear(3, 3).double()
multi = Multi({"trunk": torch.optim.SGD(model.parameters(), lr=0.1), "head": torch.optim.SGD(head.parameters(), lr=0.1)})
for x, y in data:
    multi.zero_grad()
    criterion(head(model(x)), y).backward()
    multi.step("trunk")
    multi.step("head")
"""
    assert "GG101" not in [f.code for f in gg.lint_source(_source(body), "train.py")]
