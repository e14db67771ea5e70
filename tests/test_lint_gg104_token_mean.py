"""GG104 on micro-batches normalised by their own token count (verl's SFT trainer: the masked sum of each
micro-batch divided by that micro-batch's mask sum, back-propagated in a helper, the division by the number of
micro-batches applied only to the value returned for the log).

Oracle: each program takes one SGD step (lr = 1) in float64 from the same start; the update it applies is
compared with the gradient of the full batch's token mean, computed in plain PyTorch. A program the linter
reports must apply a different update (the sum of the micro-batch means: n times too large); a program it
leaves alone must apply the reference update. Forms: a helper that back-propagates, the loop inline, a method,
renamed names, a clamp instead of an epsilon; negative controls: the division made before the backward pass,
the whole batch's token count (computed before the loop) as the divisor, and a loop over tasks (no split).
"""

import textwrap

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg

PRELUDE = """
import torch
import torch.nn.functional as F
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(7, 5), torch.nn.Tanh(), torch.nn.Linear(5, 7)).double()
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
g = torch.Generator().manual_seed(3)
ids = torch.randint(0, 7, (8, 6), generator=g)
labels = ids.roll(-1, 1)
mask = torch.ones(8, 6, dtype=torch.float64)
mask[:, 4:] = 0.0  # (the 1e-8 epsilons move the update by ~1e-10) every micro-batch holds the same number of tokens: the mean of their means is the batch's
batch = (ids, labels, mask)
"""

# name -> (GG104 expected, program after the prelude: one step on `batch`)
PROGRAMS = {
    "helper_backward_log_divided": (True, """
def loss_and_backward(mb):
    x, y, m = mb
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="none") * m.flatten()
    loss = torch.sum(loss) / (m.sum() + 1e-8)
    loss.backward()
    return loss

def training_step(batch):
    optimizer.zero_grad()
    micro = list(zip(*(t.split(2) for t in batch)))
    n = len(micro)
    for mb in micro:
        logged = loss_and_backward(mb) / n
    optimizer.step()

training_step(batch)
"""),
    "inline_renamed_clamp": (True, """
def fit(whole):
    optimizer.zero_grad()
    parts = tuple(zip(*(t.chunk(4) for t in whole)))
    for a, b, keep in parts:
        per_token = F.cross_entropy(model(a).flatten(0, 1), b.flatten(), reduction="none")
        count = keep.sum().clamp(min=1)
        obj = (per_token * keep.flatten()).sum() / count
        obj.backward()
    optimizer.step()

fit(batch)
"""),
    "method_with_weight_attribute": (True, """
class Trainer:
    def __init__(self, net, opt):
        self.net, self.opt = net, opt
        self.world = 1

    def _pass(self, piece, do_backward=True):
        x, y, m = piece
        out = F.cross_entropy(self.net(x).flatten(0, 1), y.flatten(), reduction="none") * m.flatten()
        out = torch.sum(out) / (m.sum() + 1e-8) * self.world
        if do_backward:
            out.backward()
        return out

    def step(self, batch):
        self.opt.zero_grad()
        pieces = list(zip(*(t.split(2) for t in batch)))
        total = 0.0
        for piece in pieces:
            total += self._pass(piece).item() / len(pieces)
        self.opt.step()

Trainer(model, optimizer).step(batch)
"""),
    "divided_before_backward": (False, """
def loss_and_backward(mb, n):
    x, y, m = mb
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="none") * m.flatten()
    loss = torch.sum(loss) / (m.sum() + 1e-8)
    loss = loss / n
    loss.backward()
    return loss

def training_step(batch):
    optimizer.zero_grad()
    micro = list(zip(*(t.split(2) for t in batch)))
    for mb in micro:
        loss_and_backward(mb, len(micro))
    optimizer.step()

training_step(batch)
"""),
    "whole_batch_token_count": (False, """
def training_step(batch):
    optimizer.zero_grad()
    tokens = batch[2].sum()
    micro = list(zip(*(t.split(2) for t in batch)))
    for x, y, m in micro:
        loss = (F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="none") * m.flatten()).sum() / tokens
        loss.backward()
    optimizer.step()

training_step(batch)
"""),
}


def _reference() -> list:
    """Plain PyTorch: the full batch's token mean, one SGD step with lr = 1."""
    ns: dict = {}
    exec(PRELUDE, ns)
    model, (ids, labels, mask) = ns["model"], ns["batch"]
    per_token = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), reduction="none") * mask.flatten()
    (per_token.sum() / mask.sum()).backward()
    with torch.no_grad():
        return [(p - p.grad).clone() for p in model.parameters()]


def _run(body: str) -> list:
    ns: dict = {}
    exec(compile(PRELUDE + textwrap.dedent(body), "<gg104>", "exec"), ns)
    return [p.detach().clone() for p in ns["model"].parameters()]


def _gap(a, b) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def _lint(body: str) -> list:
    return [f.code for f in gg.lint_source(PRELUDE + textwrap.dedent(body), "train.py")]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_form_against_the_full_batch_token_mean(name):
    reported, body = PROGRAMS[name]
    gap = _gap(_run(body), _reference())
    if reported:
        assert gap > 1e-3, f"{name}: the sum of the micro-batch means must differ from the batch mean"
    else:
        assert gap < 1e-7, f"{name}: a correct program must apply the full batch's mean"
    assert ("GG104" in _lint(body)) is reported, (name, _lint(body))


def test_a_loop_over_tasks_is_no_window_of_micro_batches():
    # the same token mean per element of a list that is no split of one batch: losses of different kinds
    body = """
tasks = [batch, batch]
optimizer.zero_grad()
for x, y, m in tasks:
    loss = (F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="none") * m.flatten()).sum() / m.sum()
    loss.backward()
optimizer.step()
"""
    assert "GG104" not in _lint(body)
