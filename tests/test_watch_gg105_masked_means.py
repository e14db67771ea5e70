"""The watch on micro-batches normalised by their own token count (prime-rl: each micro-batch's masked token
loss summed and divided by n times its own mask sum, instead of by the whole batch's token count).

A masked sum divided by a number is read as a mean over the mask's kept items (as nll_loss's total weight), so
GG105 compares the per-token weights of the window's micro-batches. Oracle: plain PyTorch in float64, the whole
batch's token mean; each program runs one window of 4 micro-batches and one SGD step (lr = 1). Programs that
weigh tokens unequally apply a different update and draw GG105; the batch-token normalisation, and the
per-micro-batch normalisation when every micro-batch holds the same number of tokens (the same code, equal
counts), apply the reference update and draw nothing.
"""

import textwrap

import pytest
import torch

import gradguard as gg
from gradguard.watcher._graph import analyze_loss


def _prelude(lengths) -> str:
    return f"""
import torch
import torch.nn.functional as F
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(9, 6), torch.nn.Tanh(), torch.nn.Linear(6, 9)).double()
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
g = torch.Generator().manual_seed(5)
n = 4
batch = []
for length in {tuple(lengths)!r}:
    ids = torch.randint(0, 9, (2, 10), generator=g)
    mask = torch.zeros(2, 10, dtype=torch.float64)
    mask.view(-1)[:length] = 1
    batch.append((ids, ids.roll(-1, 1), mask))
"""


UNEQUAL, EQUAL = (3, 7, 12, 20), (9, 9, 9, 9)

# name -> (lengths, GG105 expected, program)
PROGRAMS = {
    "own_count_inline": (UNEQUAL, True, """
for ids, labels, mask in batch:
    token_loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), reduction="none").view_as(mask)
    loss = (token_loss * mask).sum() / (n * mask.sum())
    loss.backward()
optimizer.step()
optimizer.zero_grad()
"""),
    "own_count_helper_renamed": (UNEQUAL, True, """
def masked_mean(values, keep):
    return (values * keep).sum() / keep.sum()

for a, b, keep in batch:
    per_token = F.cross_entropy(model(a).flatten(0, 1), b.flatten(), reduction="none").view_as(keep)
    (masked_mean(per_token, keep) / len(batch)).backward()
optimizer.step()
optimizer.zero_grad()
"""),
    "batch_count": (UNEQUAL, False, """
total_tokens = sum(mask.sum() for _, _, mask in batch)
for ids, labels, mask in batch:
    token_loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), reduction="none").view_as(mask)
    loss = (token_loss * mask).sum() / total_tokens
    loss.backward()
optimizer.step()
optimizer.zero_grad()
"""),
    "own_count_equal_lengths": (EQUAL, False, """
for ids, labels, mask in batch:
    token_loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), reduction="none").view_as(mask)
    loss = (token_loss * mask).sum() / (n * mask.sum())
    loss.backward()
optimizer.step()
optimizer.zero_grad()
"""),
}


def _reference(lengths) -> list:
    """The whole batch's token mean, one SGD step with lr = 1, in plain PyTorch."""
    ns: dict = {}
    exec(_prelude(lengths), ns)
    model = ns["model"]
    total, count = 0.0, 0.0
    for ids, labels, mask in ns["batch"]:
        tl = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), reduction="none")
        total = total + (tl * mask.flatten()).sum()
        count += float(mask.sum())
    (total / count).backward()
    with torch.no_grad():
        return [(p - p.grad).clone() for p in model.parameters()]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_window_against_the_batch_token_mean(name):
    lengths, unequal, body = PROGRAMS[name]
    ns: dict = {}
    with gg.watch(mode="record") as w:
        exec(compile(_prelude(lengths) + textwrap.dedent(body), "<gg105>", "exec"), ns)
    ref = _reference(lengths)
    gap = max(float((p.detach() - r).abs().max()) for p, r in zip(ns["model"].parameters(), ref))
    if unequal:
        assert gap > 1e-4, f"{name}: unequal token weights must move the update"
    else:
        assert gap < 1e-12, f"{name}: equal token weights give the batch's token mean"
    codes = [f.code for f in w.findings]
    assert ("GG105" in codes) is unequal, (name, codes)
    assert not set(codes) - {"GG105"}, (name, codes)


def test_a_masked_sum_divided_is_a_mean_over_the_kept_items():
    x = torch.ones(3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.float64)
    info = analyze_loss((x * mask).sum() / mask.sum())
    assert (info.kind, info.count, info.factor) == ("mean", 3.0, 1.0)
    info = analyze_loss((x * mask).sum() / (5 * mask.sum()))
    assert (info.kind, info.count, info.scaled) == ("mean", 3.0, True) and abs(info.factor - 0.2) < 1e-12
    # weights that are no mask, and an undivided masked sum, stay what they were
    assert analyze_loss((x * (2 * mask)).sum() / 5).kind == "sum"
    assert analyze_loss((x * mask).sum()).kind == "sum"
