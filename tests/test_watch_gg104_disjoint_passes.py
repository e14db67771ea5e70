"""GG104 (and every window rule) only where passes of one line add up in one buffer.

A locally supervised network (InfoPro, as GradBench reduces it) back-propagates each block's
own loss inside its forward, from one ``loss.backward()`` line, the block's input detached: one
step then follows several passes of that line, but each pass reaches parameters no other pass
reaches. No ``.grad`` sums two of them, so nothing is K times too large and GG104 must stay
quiet. The oracle is plain PyTorch in float64: every block's gradient at the step equals the
gradient of its own loss alone. The negative control keeps the line and the network but runs
the blocks' passes twice per step on two micro-batches (the same parameters reached twice,
losses undivided): the step's gradient is twice the window's mean and GG104 is reported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import gradguard as gg


class Local(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh()) for _ in range(3)])
        self.heads = torch.nn.ModuleList([torch.nn.Linear(6, 1) for _ in range(3)])

    def forward(self, x, y):
        for k, (block, head) in enumerate(zip(self.blocks, self.heads)):
            x = block(x)
            loss = F.mse_loss(head(x), y)
            if k < len(self.blocks) - 1:
                loss.backward()  # the block's own loss, inside the forward
                x = x.detach()
        return loss


def _data(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 6, generator=g, dtype=torch.float64), torch.randn(8, 1, generator=g, dtype=torch.float64))
            for _ in range(n)]


def _reference_grads(model, x, y):
    """Each block's (and head's) gradient from its own loss alone, plain autograd."""
    out = {}
    h = x
    for block, head in zip(model.blocks, model.heads):
        h = block(h)
        loss = F.mse_loss(head(h), y)
        params = list(block.parameters()) + list(head.parameters())
        for p, g in zip(params, torch.autograd.grad(loss, params)):
            out[id(p)] = g
        h = h.detach()
    return out


def test_passes_of_one_line_on_disjoint_blocks_are_no_window():
    torch.manual_seed(0)
    model = Local().double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with gg.watch(mode="record") as w:
        for x, y in _data(4):
            ref = _reference_grads(model, x, y)
            opt.zero_grad()
            model(x, y).backward()
            for p in model.parameters():
                torch.testing.assert_close(p.grad, ref[id(p)], rtol=1e-12, atol=1e-12)
            opt.step()
    assert [f.code for f in w.findings] == []


def test_the_same_line_reaching_the_same_blocks_twice_is_an_unscaled_window():
    # negative control: two micro-batches per step through the same blocks, nothing divided
    torch.manual_seed(0)
    model = Local().double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = _data(8)
    with gg.watch(mode="record") as w:
        for i in range(0, 8, 2):
            opt.zero_grad()
            refs = [_reference_grads(model, x, y) for x, y in data[i:i + 2]]
            for x, y in data[i:i + 2]:
                model(x, y).backward()
            p = model.blocks[0][0].weight
            # the step's gradient is the sum of the two micro-batches' means: twice the window's mean
            torch.testing.assert_close(p.grad, refs[0][id(p)] + refs[1][id(p)], rtol=1e-12, atol=1e-12)
            opt.step()
    assert "GG104" in [f.code for f in w.findings]
