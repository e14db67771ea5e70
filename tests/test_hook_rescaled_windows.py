"""A window averaged by a tensor gradient hook instead of the loss's divisor (DeepSpeed's pipeline engine: the
last stage's output hook divides the incoming gradient by the accumulation steps; the loss stays undivided).

Oracle: plain PyTorch in float64, the full window's mean loss back-propagated once; each program runs one window
of K = 4 micro-batches and one SGD step (lr = 1) from the same start. A program whose hook divides by K applies
exactly the reference update and must draw no GG104 from the watch or the linter (the loss's graph shows no
division, but the pass's weight is not that graph's factor). Negative controls: a hook that only reads the
gradient (returns None) leaves the window undivided, applies K times the reference, and is still GG104 for both
tools; a window with no hook at all likewise.
"""

import textwrap

import pytest
import torch

import gradguard as gg

PRELUDE = """
import torch
import torch.nn.functional as F
torch.manual_seed(0)
K = 4
model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1)).double()
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
g = torch.Generator().manual_seed(2)
data = [(torch.randn(3, 5, generator=g, dtype=torch.float64), torch.randn(3, 1, generator=g, dtype=torch.float64))
        for _ in range(K)]
"""

# name -> (window divided by K, program)
PROGRAMS = {
    "lambda_hook_on_output": (True, """
for i, (x, y) in enumerate(data):
    out = model(x)
    out.register_hook(lambda grad: grad / K)
    F.mse_loss(out, y).backward()
    if (i + 1) % K == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "factory_hook_in_a_module": (True, """
class LastStage(torch.nn.Module):
    def __init__(self, net, steps):
        super().__init__()
        self.net, self.steps = net, steps

    def _scale(self):
        def hook(g):
            return g / self.steps
        return hook

    def forward(self, x):
        h = self.net(x)
        if self.training and h.requires_grad:
            h.register_hook(self._scale())
        return h

wrapped = LastStage(model, K)
for i, (a, b) in enumerate(data):
    err = F.mse_loss(wrapped(a), b)
    err.backward()
    if (i + 1) % K == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "reading_hook_only": (False, """
norms = []
for i, (x, y) in enumerate(data):
    out = model(x)
    out.register_hook(lambda grad: norms.append(float(grad.norm())))
    F.mse_loss(out, y).backward()
    if (i + 1) % K == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
    "no_hook": (False, """
for i, (x, y) in enumerate(data):
    F.mse_loss(model(x), y).backward()
    if (i + 1) % K == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
}


def _reference() -> list:
    ns: dict = {}
    exec(PRELUDE, ns)
    model = ns["model"]
    x = torch.cat([a for a, _ in ns["data"]])
    y = torch.cat([b for _, b in ns["data"]])
    torch.nn.functional.mse_loss(model(x), y).backward()
    with torch.no_grad():
        return [(p - p.grad).clone() for p in model.parameters()]


def _gap(a, b) -> float:
    return max(float((u - v).abs().max()) for u, v in zip(a, b))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_window_against_the_full_batch_mean(name):
    divided, body = PROGRAMS[name]
    source = PRELUDE + textwrap.dedent(body)
    ns: dict = {}
    with gg.watch(mode="record") as w:
        exec(compile(source, "<hooks>", "exec"), ns)
    gap = _gap([p.detach() for p in ns["model"].parameters()], _reference())
    if divided:
        assert gap < 1e-12, f"{name}: the hook's division makes the window's mean"
    else:
        assert gap > 1e-3, f"{name}: an undivided window applies K times the mean"
    watch = [f.code for f in w.findings]
    lint = [f.code for f in gg.lint_source(source, "train.py")]
    assert ("GG104" in watch) is not divided, (name, watch)
    assert ("GG104" in lint) is not divided, (name, lint)
