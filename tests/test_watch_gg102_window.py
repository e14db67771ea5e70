"""GG102 at the first step when a clearing discards a window by intent (zero_grad on every micro-batch).

The passes of one backward line, each divided by their number in the step
interval, were meant to add up into the step; a clearing that threw all but the
last away is reported at that step. Skips (a spike, a whole window dropped and
restarted) do not divide by the number of passes they discard and stay silent
until the three-interval evidence, as before.
"""

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _batch():
    return torch.randn(4, 6), torch.randint(0, 3, (4,))


@pytest.mark.parametrize("accum", [2, 4])
def test_zero_grad_on_every_micro_batch_is_reported_at_step_1(accum):
    model, opt = _setup()
    with gg.watch(mode="record") as w:
        for i in range(3 * accum):
            opt.zero_grad()  # BUG: clears the window's earlier micro-batches
            x, y = _batch()
            (F.cross_entropy(model(x), y) / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
    assert [(f.code, f.step) for f in w.findings] == [("GG102", 1)]


def test_the_finding_is_true_the_step_applies_one_micro_batch_of_the_window():
    model, opt = _setup()
    accum, batches = 4, [_batch() for _ in range(4)]
    for x, y in batches:  # what the buggy loop leaves in .grad at its step
        opt.zero_grad()
        (F.cross_entropy(model(x), y) / accum).backward()
    applied = [p.grad.clone() for p in model.parameters()]
    opt.zero_grad()
    (F.cross_entropy(model(batches[-1][0]), batches[-1][1]) / accum).backward()
    torch.testing.assert_close(applied, [p.grad for p in model.parameters()])  # the last micro-batch alone
    opt.zero_grad()
    F.cross_entropy(model(torch.cat([b[0] for b in batches])), torch.cat([b[1] for b in batches])).backward()
    assert not all(torch.allclose(a, p.grad) for a, p in zip(applied, model.parameters()))


def test_skipping_spikes_is_not_a_window():
    # Two consecutive skipped batches in a loop without accumulation: not divided by anything.
    model, opt = _setup()
    with gg.watch(mode="record") as w:
        for i in range(6):
            x, y = _batch()
            F.cross_entropy(model(x), y).backward()
            if i in (1, 2):  # a loss spike: drop this batch
                opt.zero_grad()
                continue
            opt.step()
            opt.zero_grad()
    assert w.findings == []


def test_dropping_a_whole_window_and_restarting_is_not_reported_at_step_1():
    model, opt = _setup()
    accum = 2
    with gg.watch(mode="record") as w:
        micro = 0
        for i in range(8):
            x, y = _batch()
            (F.cross_entropy(model(x), y) / accum).backward()
            micro += 1
            if micro == accum:
                micro = 0
                if i == 1:  # this window's gradient norm spiked: throw it away
                    opt.zero_grad()
                    continue
                opt.step()
                opt.zero_grad()
    assert w.findings == []
