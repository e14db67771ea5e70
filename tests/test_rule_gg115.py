"""GG115 clip inside window, both tools, one set of programs.

Each program runs one accumulation window of K = 4 equal micro-batches in float64
and clips somewhere; written in the shapes users write it (a plain loop, a helper
function, a method, an inner micro-batch loop, a GradScaler flow, a `continue` guard).
The oracle is plain PyTorch on the full batch: the window's mean gradient clipped once
to ``max_norm``, one SGD step. A program that clips inside the window must end away from
that update and draw GG115 from the watch and from the linter; a program that clips once
after the window's last backward pass must end on it (to 1e-12) and draw nothing. Per-example
clipping that moves each micro-batch's gradient into a buffer and clears (DP-SGD style) and a
loop with one backward pass per step are the negative controls that are not windows at all.
"""

import textwrap

import pytest
import torch

import gradguard as gg

PRELUDE = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
K, max_norm = 4, 0.05
g = torch.Generator().manual_seed(1)
data = [(torch.randn(5, 6, generator=g, dtype=torch.float64), torch.randn(5, 1, generator=g, dtype=torch.float64))
        for _ in range(K)]
"""

# name -> (clips inside the window, the program after the prelude)
PROGRAMS = {
    "loop": (True, """
for i, (x, y) in enumerate(data):
    loss = torch.nn.functional.mse_loss(model(x), y) / K
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if (i + 1) % K == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "loop_fixed": (False, """
for i, (x, y) in enumerate(data):
    loss = torch.nn.functional.mse_loss(model(x), y) / K
    loss.backward()
    if (i + 1) % K == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        optimizer.zero_grad()
"""),
    "value_clip": (True, """
for i, (x, y) in enumerate(data):
    (torch.nn.functional.mse_loss(model(x), y) / K).backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
    if (i + 1) % K == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "norm_then_clip": (True, """
for i, (x, y) in enumerate(data):
    (torch.nn.functional.mse_loss(model(x), y) / K).backward()
    total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, total)  # as Accelerate clips
    if (i + 1) % K == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "helper": (True, """
def micro_step(net, batch, scale):
    inputs, target = batch
    (torch.nn.functional.mse_loss(net(inputs), target) / scale).backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm)

for n, batch in enumerate(data):
    micro_step(model, batch, K)
    if (n + 1) % K == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "helper_fixed": (False, """
def micro_step(net, batch, scale):
    inputs, target = batch
    (torch.nn.functional.mse_loss(net(inputs), target) / scale).backward()

def finish(net, opt):
    torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm)
    opt.step()
    opt.zero_grad()

for n, batch in enumerate(data):
    micro_step(model, batch, K)
    if (n + 1) % K == 0:
        finish(model, optimizer)
"""),
    "method": (True, """
class Trainer:
    def __init__(self, net, opt):
        self.net, self.opt, self.seen = net, opt, 0

    def clip(self):
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), max_norm)

    def train_batch(self, x, y):
        (torch.nn.functional.mse_loss(self.net(x), y) / K).backward()
        self.clip()
        self.seen += 1
        if self.seen % K == 0:
            self.opt.step()
            self.opt.zero_grad()

    def fit(self, batches):
        for x, y in batches:
            self.train_batch(x, y)

Trainer(model, optimizer).fit(data)
"""),
    "inner_loop": (True, """
for window in [data]:
    for x, y in window:
        (torch.nn.functional.mse_loss(model(x), y) / K).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
"""),
    "inner_loop_fixed": (False, """
for window in [data]:
    for x, y in window:
        (torch.nn.functional.mse_loss(model(x), y) / K).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
"""),
    "continue_guard_fixed": (False, """
for i, (x, y) in enumerate(data):
    (torch.nn.functional.mse_loss(model(x), y) / K).backward()
    if (i + 1) % K != 0:
        continue
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
"""),
}

# Not windows: the oracle above does not apply, and neither tool may report GG115.
NOT_WINDOWS = {
    "one_pass_per_step": """
for x, y in data:
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
""",
    "step_skipped_on_a_nonfinite_norm": """
for x, y in data:
    torch.nn.functional.mse_loss(model(x), y).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if torch.isfinite(norm):
        optimizer.step()
        optimizer.zero_grad()
""",
    "per_example_clip_then_clear": """
sums = [torch.zeros_like(p) for p in model.parameters()]
for i, (x, y) in enumerate(data):
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    for s, p in zip(sums, model.parameters()):
        s += p.grad
    optimizer.zero_grad()
    if (i + 1) % K == 0:
        for s, p in zip(sums, model.parameters()):
            p.grad = s / K
        optimizer.step()
        optimizer.zero_grad()
""",
}


def _reference() -> list:
    """Plain PyTorch: the full batch's mean gradient, clipped once, one SGD step (float64)."""
    ns: dict = {}
    exec(PRELUDE, ns)
    model, data = ns["model"], ns["data"]
    x = torch.cat([b[0] for b in data])
    y = torch.cat([b[1] for b in data])
    torch.nn.functional.mse_loss(model(x), y).backward()
    grads = [p.grad for p in model.parameters()]
    norm = torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))
    factor = min(1.0, ns["max_norm"] / (float(norm) + 1e-6))  # clip_grad_norm_'s own epsilon
    with torch.no_grad():
        return [p - 0.5 * factor * g for p, g in zip(model.parameters(), grads)]


def _watch(body: str):
    ns: dict = {}
    with gg.watch(mode="record") as w:
        exec(compile(PRELUDE + textwrap.dedent(body), "<gg115>", "exec"), ns)
    return [f.code for f in w.findings], [p.detach().clone() for p in ns["model"].parameters()]


def _lint(body: str) -> list:
    return [f.code for f in gg.lint_source(PRELUDE + textwrap.dedent(body), "train.py")]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_form_against_the_clipped_full_batch_update(name):
    inside, body = PROGRAMS[name]
    codes, params = _watch(body)
    gap = max(float((a - b).abs().max()) for a, b in zip(params, _reference()))
    if inside:
        assert gap > 1e-4, f"{name}: the clip inside the window should move the update away from the oracle"
    else:
        assert gap < 1e-12, f"{name}: a clip once per window must give the clipped full-batch update"
    assert ("GG115" in codes) is inside, (name, codes)
    assert ("GG115" in _lint(body)) is inside, name


@pytest.mark.parametrize("name", sorted(NOT_WINDOWS))
def test_no_window_no_finding(name):
    body = NOT_WINDOWS[name]
    assert "GG115" not in _watch(body)[0]
    assert "GG115" not in _lint(body)


def test_gradscaler_flow_inside_window_is_reported_by_both():
    # Under AMP the clip inside the window is also before unscale_ (GG112): both are reported.
    body = """
scaler = torch.amp.GradScaler("cpu")
model.float()
for i, (x, y) in enumerate(data):
    scaler.scale(torch.nn.functional.mse_loss(model(x.float()), y.float()) / K).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if (i + 1) % K == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
    assert "GG115" in _watch(body)[0]
    assert "GG115" in _lint(body)


def test_raise_mode_stops_before_the_step_reads_the_gradient():
    ns: dict = {}
    exec(PRELUDE, ns)
    before = [p.detach().clone() for p in ns["model"].parameters()]
    with pytest.raises(gg.GradientBugError, match="GG115"):
        with gg.watch(mode="raise"):
            exec(compile(textwrap.dedent(PROGRAMS["loop"][1]), "<gg115>", "exec"), ns)
    assert all(torch.equal(a, b) for a, b in zip(before, ns["model"].parameters()))


ACCELERATE = """
import torch
from accelerate import Accelerator
torch.manual_seed(0)
accelerator = Accelerator(gradient_accumulation_steps=4, cpu=True)
model = torch.nn.Linear(6, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(8):
    x, y = torch.randn(5, 6), torch.randn(5, 1)
    with accelerator.accumulate(model):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        CLIP
        optimizer.step()
        optimizer.zero_grad()
"""


@pytest.mark.slow
@pytest.mark.parametrize("clip, inside", [
    ("accelerator.clip_grad_norm_(model.parameters(), 0.05)", True),
    ("if accelerator.sync_gradients:\n            accelerator.clip_grad_norm_(model.parameters(), 0.05)", False),
])
def test_accelerate_accumulate(clip, inside):
    pytest.importorskip("accelerate")
    source = ACCELERATE.replace("CLIP", clip)
    with gg.watch(mode="record") as w:
        exec(compile(source, "<gg115-accelerate>", "exec"), {})
    assert ("GG115" in [f.code for f in w.findings]) is inside
    assert ("GG115" in [f.code for f in gg.lint_source(source, "train.py")]) is inside
