"""GG113 for a window whose summed token loss is divided by the window's token count and again by the
accumulation steps (unsloth-zoo: ``num_items_in_batch`` handed to a fused cross-entropy that divides each
micro-batch's summed loss by it, inside a trainer that also divides the loss by its accumulation steps).

Oracle: plain PyTorch in float64, the gradient of the whole window's token mean (ignored targets left out).
Each program runs one window of 4 micro-batches and one SGD step (lr = 1); the update it applies is compared
with that gradient. The programs the watch reports apply exactly 1/4 of it; the others apply it and draw
nothing. Forms: inline, the count and the loss in helpers, ignored targets counted out; negative controls:
the single division (the fix), and a loss with class weights (whose total weight is no count: not judged).
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
vocab = 11
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 6), torch.nn.Tanh(), torch.nn.Linear(6, vocab)).double()
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
g = torch.Generator().manual_seed(3)
window = [torch.randint(0, vocab, (3, 7), generator=g) for _ in range(4)]
labels = [w.roll(-1, 1) for w in window]
labels[1][0, :4] = -100
labels[3][2, 1:] = -100
K = 4
"""

# name -> (GG113 expected, program after the prelude: one window of K micro-batches, one step)
PROGRAMS = {
    "inline": (True, """
n_items = sum(int((y != -100).sum()) for y in labels)
for x, y in zip(window, labels):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum") / n_items
    loss = loss / K
    loss.backward()
optimizer.step()
optimizer.zero_grad()
"""),
    "helpers": (True, """
def count_items(targets):
    return sum((t != -100).sum().item() for t in targets)

def fused_ce(logits, target, num_items_in_batch=None):
    total = F.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1), reduction="sum")
    return total / num_items_in_batch if num_items_in_batch is not None else total / (target != -100).sum()

def training_step(x, y, num_items, accumulation_steps):
    out = fused_ce(model(x), y, num_items)
    (out / accumulation_steps).backward()

num = count_items(labels)
for x, y in zip(window, labels):
    training_step(x, y, num, K)
optimizer.step()
optimizer.zero_grad()
"""),
    "divided_once": (False, """
n_items = sum(int((y != -100).sum()) for y in labels)
for x, y in zip(window, labels):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum") / n_items
    loss.backward()
optimizer.step()
optimizer.zero_grad()
"""),
}


def _reference() -> list:
    """The gradient of the window's token mean (ignored targets left out), one SGD step with lr = 1."""
    ns: dict = {}
    exec(PRELUDE, ns)
    model, window, labels = ns["model"], ns["window"], ns["labels"]
    logits = torch.cat([model(x).flatten(0, 1) for x in window])
    F.cross_entropy(logits, torch.cat([y.flatten() for y in labels])).backward()
    return [p.grad.clone() for p in model.parameters()]


def _run(body: str):
    ns: dict = {}
    with gg.watch(mode="record") as w:
        exec(compile(PRELUDE + textwrap.dedent(body), "<gg113>", "exec"), ns)
    return list(w.findings), ns


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_form_against_the_window_token_mean(name):
    reported, body = PROGRAMS[name]
    start: dict = {}
    exec(PRELUDE, start)
    findings, ns = _run(body)
    applied = [(a - b).detach() for a, b in zip(start["model"].parameters(), ns["model"].parameters())]
    ref = _reference()
    scale = 0.25 if reported else 1.0
    assert max(float((a - scale * r).abs().max()) for a, r in zip(applied, ref)) < 1e-10, name
    assert max(float((a - r).abs().max()) for a, r in zip(applied, ref)) > 1e-4 or not reported
    found = [(f.code, f.step) for f in findings]
    assert found == ([("GG113", 1)] if reported else []), (name, found)


def test_class_weights_are_not_a_count():
    # the same double division with class weights: nll_loss's total weight is their sum, not a count
    body = """
weights = torch.linspace(0.5, 1.5, vocab, dtype=torch.float64)
n_items = sum(int((y != -100).sum()) for y in labels)
for x, y in zip(window, labels):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum", weight=weights) / n_items / K
    loss.backward()
optimizer.step()
optimizer.zero_grad()
"""
    findings, _ = _run(body)
    assert [f.code for f in findings if f.code == "GG113"] == []
