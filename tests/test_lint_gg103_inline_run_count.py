"""GG103 where the window test itself computes the run-wide count: ``(epoch * num_steps + idx + 1) % K``.

Swin Transformer's published fix for its per-epoch window counter (GradBench's fixed twin of
that case) counts windows over the whole run inline in the test, with ``num_steps =
len(data_loader)`` bound once and the gradients cleared once before the epoch loop. A window
left open at one epoch's end stays in ``.grad`` and closes in the next epoch, so only the run's
last window can be dropped: the linter must read the count to its end (epochs times batches)
and say GG103 exactly when a pass's gradient reaches no step.

The oracle is the program itself, run in float64: it counts, per backward pass, whether a step
applied its gradient before a clearing or the end (no gradguard involved), and for the fixed
shape its final weights are compared with plain SGD over the run's consecutive windows. The
negative controls change only a count or move a clearing to each epoch's start (which wipes
the open window: each epoch then drops its tail).
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg

PROGRAM = """
import torch

ACCUMULATION_STEPS = __K__
data_loader = [(torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 1, dtype=torch.float64)) for _ in range(__N__)]
model = torch.nn.Linear(5, 1).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
num_steps = len(data_loader)
optimizer.zero_grad()
for epoch in range(__E__):
    model.train()
    for idx, (samples, targets) in enumerate(data_loader):
        loss = (model(samples) - targets).pow(2).mean() / ACCUMULATION_STEPS
        loss.backward()
        if (__COUNT__ + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
"""

INLINE = "epoch * num_steps + idx"
INLINE_LEN = "epoch * len(data_loader) + idx"


def _program(e, k, n, count=INLINE, clear_each_epoch=False):
    source = PROGRAM.replace("__E__", str(e)).replace("__K__", str(k)).replace("__N__", str(n))
    source = source.replace("__COUNT__", count)
    if clear_each_epoch:
        source = source.replace("    model.train()\n", "    model.train()\n    optimizer.zero_grad()\n")
    return source


class _Counting(torch.optim.SGD):
    """SGD that counts the backward passes whose gradient a step applied, and those cleared or left."""

    def __init__(self, params, **kw):
        params = list(params)
        super().__init__(params, **kw)
        self.pending = self.applied = self.dropped = 0
        params[0].register_post_accumulate_grad_hook(lambda p: setattr(self, "pending", self.pending + 1))

    def step(self, closure=None):
        self.applied += self.pending
        self.pending = 0
        return super().step(closure)

    def zero_grad(self, set_to_none=True):
        self.dropped += self.pending
        self.pending = 0
        return super().zero_grad(set_to_none)


def _unapplied(source) -> int:
    scope = {"_Counting": _Counting}
    torch.manual_seed(0)
    exec(compile(source.replace("torch.optim.SGD(", "_Counting("), "<program>", "exec"), scope)
    opt = scope["optimizer"]
    return opt.dropped + opt.pending


def _gg103(source) -> bool:
    return any(f.code == "GG103" for f in gg.lint_source(source))


@pytest.mark.parametrize("count", [INLINE, INLINE_LEN], ids=["bound-length", "len-call"])
@pytest.mark.parametrize("e,k,n", [(2, 4, 10), (3, 4, 4), (2, 4, 6), (3, 4, 10), (2, 3, 10), (1, 4, 10)])
def test_an_inline_run_wide_count_is_read_to_the_run_s_end(count, e, k, n):
    source = _program(e, k, n, count)
    dropped = _unapplied(source)
    assert (dropped > 0) == ((e * n) % k != 0)
    assert _gg103(source) == (dropped > 0)


@pytest.mark.parametrize("e,k,n", [(2, 4, 10), (2, 4, 6)])
def test_a_clearing_at_each_epoch_start_drops_each_epoch_s_tail(e, k, n):
    # negative control: the same count, but the open window is wiped at the next epoch's start
    source = _program(e, k, n, clear_each_epoch=True)
    assert _unapplied(source) > 0
    assert _gg103(source)


def test_the_fixed_shape_applies_every_window_s_mean_in_float64():
    # the twin's shape (2 epochs of 10 batches, windows of 4): 5 steps, each the mean of 4 consecutive
    # batches of the run, against plain SGD over the flattened run
    source = _program(2, 4, 10)
    torch.manual_seed(0)
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    torch.manual_seed(0)
    data = [(torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 1, dtype=torch.float64)) for _ in range(10)]
    ref = torch.nn.Linear(5, 1).double()
    run = data * 2
    with torch.no_grad():
        for w in range(0, len(run), 4):
            ref.zero_grad()
            with torch.enable_grad():
                x = torch.cat([b[0] for b in run[w:w + 4]])
                y = torch.cat([b[1] for b in run[w:w + 4]])
                (ref(x) - y).pow(2).mean().backward()
            for p in ref.parameters():
                p -= 0.1 * p.grad
    for a, b in zip(scope["model"].parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert not _gg103(source)
