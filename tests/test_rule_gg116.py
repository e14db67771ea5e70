"""GG116 clip-not-applied, both tools, one set of programs.

Each program trains three steps of SGD in float64, one backward pass per step, and clips
somewhere with a threshold that binds. The oracles are plain PyTorch: the same three steps
with each step's gradient clipped before it is applied, and the same three steps with no clip
at all. A program whose clip sits where no step applies what it clipped (after the step, or
after the clearing and before the backward pass) must end exactly on the UNCLIPPED trajectory
and draw GG116 from the watch and from the linter; a program that clips between the backward
pass and the step must end on the clipped one and draw nothing. Forms: a plain loop, renamed
names, a helper that steps, `set_to_none` and zero-filling clears, a value clip, a norm read
with an infinite threshold after the step (a log, not a clip).
"""

import textwrap

import pytest
import torch

import gradguard as gg

PRELUDE = """
import math
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
max_norm = 0.05
g = torch.Generator().manual_seed(1)
data = [(torch.randn(5, 6, generator=g, dtype=torch.float64), torch.randn(5, 1, generator=g, dtype=torch.float64))
        for _ in range(3)]
"""

# name -> (the clip is applied by no step, the program after the prelude)
PROGRAMS = {
    "after_step": (True, """
for x, y in data:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
"""),
    "after_step_renamed": (True, """
o, m = optimizer, model
for a, b in data:
    o.zero_grad()
    err = torch.nn.functional.mse_loss(m(a), b)
    err.backward()
    o.step()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm)
"""),
    "after_step_clear_at_end": (True, """
for x, y in data:
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    optimizer.zero_grad()
"""),
    "after_step_in_helper": (True, """
def train_step(x, y):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()

for x, y in data:
    train_step(x, y)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
"""),
    # the clip inside the helper or method that also steps: placed by the order of the helper's own lines
    "after_step_inside_helper": (True, """
def train_step(x, y):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

for x, y in data:
    train_step(x, y)
"""),
    "after_step_inside_method": (True, """
class Trainer:
    def __init__(self, net, opt, limit):
        self.net, self.opt, self.limit = net, opt, limit

    def _batch(self, opt, a, b):
        opt.zero_grad()
        err = torch.nn.functional.mse_loss(self.net(a), b)
        err.backward()
        opt.step()
        if self.limit:
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.limit)
        return err.item()

    def fit(self, batches):
        for a, b in batches:
            self._batch(self.opt, a, b)

Trainer(model, optimizer, max_norm).fit(data)
"""),
    "between_inside_helper": (False, """
def train_step(x, y):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()

for x, y in data:
    train_step(x, y)
"""),
    "helper_backward_and_clip_loop_steps": (False, """
class Trainer:
    def backward_and_clip(self, a, b):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(a), b).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

trainer = Trainer()
for x, y in data:
    trainer.backward_and_clip(x, y)
    optimizer.step()
"""),
    "value_clip_after_step": (True, """
for x, y in data:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.001)
"""),
    "before_backward_set_to_none": (True, """
for x, y in data:
    optimizer.zero_grad(set_to_none=True)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""),
    "before_backward_zero_filled": (True, """
for x, y in data:
    optimizer.zero_grad(set_to_none=False)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
"""),
    "between_backward_and_step": (False, """
for x, y in data:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
"""),
    "between_and_a_norm_read_after_the_step": (False, """
for x, y in data:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    logged = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    logged_too = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)
"""),
    "clear_at_end_clip_between": (False, """
for x, y in data:
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
"""),
    "value_clip_between": (False, """
for x, y in data:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.001)
    optimizer.step()
"""),
}


def _reference(clip) -> list:
    """Plain PyTorch: three SGD steps, each step's gradient clipped by ``clip`` (or not) before it is applied."""
    ns: dict = {}
    exec(PRELUDE, ns)
    model = ns["model"]
    for x, y in ns["data"]:
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        grads = [p.grad for p in model.parameters()]
        if clip == "norm":
            norm = torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))
            factor = min(1.0, ns["max_norm"] / (float(norm) + 1e-6))  # clip_grad_norm_'s own epsilon
            grads = [g * factor for g in grads]
        elif clip == "value":
            grads = [g.clamp(-0.001, 0.001) for g in grads]
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads):
                p -= 0.5 * g
    return [p.detach().clone() for p in model.parameters()]


def _watch(body: str):
    ns: dict = {}
    with gg.watch(mode="record") as w:
        exec(compile(PRELUDE + textwrap.dedent(body), "<gg116>", "exec"), ns)
    return [f.code for f in w.findings], [p.detach().clone() for p in ns["model"].parameters()]


def _lint(body: str) -> list:
    return [f.code for f in gg.lint_source(PRELUDE + textwrap.dedent(body), "train.py")]


def _gap(a, b) -> float:
    return max(float((x.detach() - y.detach()).abs().max()) for x, y in zip(a, b))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_form_against_the_clipped_and_the_unclipped_updates(name):
    unapplied, body = PROGRAMS[name]
    codes, params = _watch(body)
    clipped = _reference("value" if "value" in name else "norm")
    unclipped = _reference(None)
    assert _gap(clipped, unclipped) > 1e-3, "the threshold must bind, or the oracle tells nothing"
    if unapplied:
        assert _gap(params, unclipped) < 1e-12, f"{name}: a clip no step applies leaves the unclipped updates"
    else:
        assert _gap(params, clipped) < 1e-12, f"{name}: a clip between backward and step gives the clipped updates"
    assert ("GG116" in codes) is unapplied, (name, codes)
    assert ("GG116" in _lint(body)) is unapplied, (name, _lint(body))


def test_a_clip_inside_an_accumulation_window_is_gg115_not_gg116():
    body = """
for i, (x, y) in enumerate(data):
    (torch.nn.functional.mse_loss(model(x), y) / 3).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if (i + 1) % 3 == 0:
        optimizer.step()
        optimizer.zero_grad()
"""
    codes = _watch(body)[0]
    assert "GG115" in codes and "GG116" not in codes
    lint = _lint(body)
    assert "GG115" in lint and "GG116" not in lint


def test_a_clip_at_the_window_boundary_draws_nothing():
    body = """
for i, (x, y) in enumerate(data):
    (torch.nn.functional.mse_loss(model(x), y) / 3).backward()
    if (i + 1) % 3 == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        optimizer.zero_grad()
"""
    assert "GG116" not in _watch(body)[0]
    assert "GG116" not in _lint(body)


def test_a_closure_that_clips_before_returning_draws_nothing():
    # LBFGS-style: the step calls the closure, which clears, back-propagates and clips; the step applies it.
    body = """
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2)
for x, y in data:
    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return loss
    optimizer.step(closure)
"""
    assert "GG116" not in _watch(body)[0]
    assert "GG116" not in _lint(body)


def test_the_watch_reports_the_clip_after_the_first_step_at_step_1():
    ns: dict = {}
    exec(PRELUDE, ns)
    with gg.watch(mode="record") as w:
        exec(compile(textwrap.dedent(PROGRAMS["after_step"][1]), "<gg116>", "exec"), ns)
    found = [f for f in w.findings if f.code == "GG116"]
    assert len(found) == 1 and found[0].step == 1, found


def test_raise_mode_stops_before_the_unclipped_step_is_applied():
    # Clip before the backward pass: known at the step, which must not run.
    ns: dict = {}
    exec(PRELUDE, ns)
    before = [p.detach().clone() for p in ns["model"].parameters()]
    with pytest.raises(gg.GradientBugError, match="GG116"):
        with gg.watch(mode="raise"):
            exec(compile(textwrap.dedent(PROGRAMS["before_backward_set_to_none"][1]), "<gg116>", "exec"), ns)
    assert all(torch.equal(a, b) for a, b in zip(before, ns["model"].parameters()))


LIGHTNING = '''
import lightning as L
import torch
from torch.nn.utils import clip_grad_norm_


class WorldModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(6, 1).double()
        AUTOMATIC

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        STEP
        return loss

    HOOK

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)
'''

MANUAL_STEP = """opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(loss)
        CLIP
        opt.step()"""

# name -> (GG116 expected, AUTOMATIC, STEP, HOOK)
LIGHTNING_FORMS = {
    "clip_in_training_step": (True, "", "clip_grad_norm_(self.parameters(), 0.01)", ""),
    "clip_in_configure_gradient_clipping": (False, "", "", "def configure_gradient_clipping(self, optimizer, "
                                            "gradient_clip_val=None, gradient_clip_algorithm=None):\n"
                                            "        clip_grad_norm_(self.parameters(), 0.01)"),
    "norm_read_in_training_step": (False, "", "norm = clip_grad_norm_(self.parameters(), float('inf'))", ""),
    "manual_clip_between_backward_and_step": (False, "self.automatic_optimization = False",
                                              MANUAL_STEP.replace("CLIP", "clip_grad_norm_(self.parameters(), 0.01)"), ""),
    "manual_clip_after_step": (True, "self.automatic_optimization = False",
                               MANUAL_STEP.replace("CLIP", "pass") + "\n        clip_grad_norm_(self.parameters(), 0.01)", ""),
}


def _lightning_source(automatic, step, hook):
    return LIGHTNING.replace("AUTOMATIC", automatic or "pass").replace("STEP", step or "pass").replace("HOOK", hook)


@pytest.mark.parametrize("name", sorted(LIGHTNING_FORMS))
def test_lightning_forms_lint(name):
    expected, automatic, step, hook = LIGHTNING_FORMS[name]
    codes = [f.code for f in gg.lint_source(_lightning_source(automatic, step, hook), "model.py")]
    assert ("GG116" in codes) is expected, (name, codes)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["clip_in_training_step", "clip_in_configure_gradient_clipping"])
def test_lightning_fit_under_the_watch_against_plain_pytorch(name):
    pytest.importorskip("lightning")
    expected, automatic, step, hook = LIGHTNING_FORMS[name]
    ns: dict = {}
    exec(compile(_lightning_source(automatic, step, hook), "<gg116_lightning>", "exec"), ns)
    import lightning as L

    torch.manual_seed(0)
    model = ns["WorldModel"]()
    start = [p.detach().clone() for p in model.parameters()]
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(12, 6, generator=g, dtype=torch.float64), torch.randn(12, 1, generator=g, dtype=torch.float64)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    with gg.watch(mode="record") as w:
        trainer.fit(model, loader)
    # Plain PyTorch: three SGD steps, each gradient clipped to 0.01 before it is applied (or not at all).
    ref = torch.nn.Linear(6, 1).double()
    results = {}
    for clip in (True, False):
        with torch.no_grad():
            for p, s in zip(ref.parameters(), start):
                p.copy_(s)
        for i in range(0, 12, 4):
            ref.zero_grad()
            torch.nn.functional.mse_loss(ref(x[i:i + 4]), y[i:i + 4]).backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.01)
            with torch.no_grad():
                for p in ref.parameters():
                    p -= 0.5 * p.grad
        results[clip] = [p.detach().clone() for p in ref.parameters()]
    assert _gap(results[True], results[False]) > 1e-3
    assert _gap(list(model.parameters()), results[not expected]) < 1e-12, name
    assert ("GG116" in [f.code for f in w.findings]) is expected, (name, [f.code for f in w.findings])
