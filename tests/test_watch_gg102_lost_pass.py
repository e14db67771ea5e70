"""GG102 at the first step for a pass whose parameters get nothing else: a locally supervised network.

Each block but the last back-propagates its own auxiliary loss inside the forward (its output detached
before the next block), and the loop clears the gradients after the forward, before the last block's
backward and the step: the earlier blocks' gradients are thrown away and those blocks are never updated.
The step is fed by another backward line than the discarded passes (the shape of SAM or of an
adversarial example's pass, which the rule leaves alone), but here the discarded parameters find no
gradient at all at the step. The reference is plain PyTorch in float64: the full-batch update of every
block from its own loss; the bug leaves the early blocks where they were (negative control that the bug
has an effect from step 1). The watch reports GG102 at step 1; the fixed loop, a probe pass over the same
parameters as the step's pass, a probe over a part of them, and a non-finite local gradient stay silent.
"""

import torch
import torch.nn.functional as F

import gradguard as gg

BLOCKS = 3


class Local(torch.nn.Module):
    def __init__(self, helper=False):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(5, 5), torch.nn.Tanh())
                                           for _ in range(BLOCKS)])
        self.heads = torch.nn.ModuleList([torch.nn.Linear(5, 2) for _ in range(BLOCKS)])
        self.helper = helper
        self.nan = False

    def _local(self, loss):
        loss.backward()

    def forward(self, x, y):
        for k, (block, head) in enumerate(zip(self.blocks, self.heads)):
            x = block(x)
            out = head(x)
            if self.nan and k == 0:
                out = out * float("nan")
            loss = F.mse_loss(out, y)
            if k < BLOCKS - 1:
                if self.helper:
                    self._local(loss)
                else:
                    loss.backward()
                x = x.detach()
        return loss


def _data(steps):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 5, generator=g, dtype=torch.float64), torch.randn(8, 2, generator=g, dtype=torch.float64))
            for _ in range(steps)]


def _flat(model, k):
    return torch.cat([p.detach().flatten() for m in (model.blocks[k], model.heads[k]) for p in m.parameters()])


def _reference(steps):
    """Plain PyTorch, no gradguard: every block trained on its own loss by SGD (the fixed loop)."""
    torch.manual_seed(0)
    model = Local().double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in _data(steps):
        opt.zero_grad()
        model(x, y).backward()
        opt.step()
    return model


def _run(form, steps=3, watch=True, from_step=0, only=None):
    torch.manual_seed(0)
    model = Local(helper=form == "helper").double()
    model.nan = form == "nan"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start = [_flat(model, k) for k in range(BLOCKS)]

    def loop():
        for i, (x, y) in enumerate(_data(steps)):
            late = i < from_step or (only is not None and i != only)  # the fixed loop on these iterations
            if form in ("fixed", "bug_top") or late:
                opt.zero_grad()
            if form == "probe_all":  # a pass over the whole network read and cleared (a gradient probe)
                opt.zero_grad()
                sum(F.mse_loss(h(b(x)), y) for b, h in zip(model.blocks, model.heads)).backward()
                opt.zero_grad()
            if form == "probe_part":  # a probe over the first block only, cleared; the loss then reaches it
                F.mse_loss(model.heads[0](model.blocks[0](x)), y).backward()
                opt.zero_grad()
            if form in ("probe_all", "probe_part"):
                model.helper = False
                h = x
                total = 0
                for b, hd in zip(model.blocks, model.heads):
                    h = b(h)
                    total = total + F.mse_loss(hd(h), y)
                total.backward()
                opt.step()
                opt.zero_grad()
                continue
            loss = model(x, y)
            if late:
                pass
            elif form == "model_zero_grad":
                model.zero_grad()
            elif form == "by_hand":
                for p in model.parameters():
                    p.grad = None
            elif form == "zero_filled":
                opt.zero_grad(set_to_none=False)
            elif form != "fixed":
                opt.zero_grad()
            loss.backward()
            opt.step()

    if not watch:
        loop()
        return None, model, start
    with gg.watch(mode="record") as w:
        loop()
    return [(f.code, f.step) for f in w.findings], model, start


def test_the_bug_leaves_early_blocks_untrained_float64():
    ref = _reference(3)
    _, bug, start = _run("bug", watch=False)
    _, fixed, _ = _run("fixed", watch=False)
    for k in range(BLOCKS):
        assert torch.allclose(_flat(fixed, k), _flat(ref, k), atol=1e-12, rtol=0)
    for k in range(BLOCKS - 1):
        assert torch.equal(_flat(bug, k), start[k])  # never updated
        assert (_flat(ref, k) - start[k]).norm() > 1e-3  # the reference moves them
    assert (_flat(bug, BLOCKS - 1) - start[BLOCKS - 1]).norm() > 1e-3  # the last block is trained


def test_cleared_local_passes_are_reported_at_step_1():
    for form in ("bug", "bug_top", "helper", "model_zero_grad", "zero_filled", "by_hand"):
        found, _, _ = _run(form)
        assert ("GG102", 1) in found, (form, found)
        assert [c for c, _ in found if c == "GG102"] == ["GG102"], (form, found)  # once, not every step


def test_the_fixed_loop_and_probes_stay_silent():
    for form in ("fixed", "probe_all", "probe_part"):
        found, _, _ = _run(form)
        assert found == [], (form, found)


def test_from_mid_run_it_is_reported_once_systematic():
    """Mid-run a pass may be dropped now and then on purpose: the bug starting at the third step is
    reported in its third interval (as any systematic discard), one such drop never."""
    found, _, _ = _run("bug_top", steps=7, from_step=2)  # cleared before the forward too: not on applied gradient
    assert [f for f in found if f[0] == "GG102"] == [("GG102", 5)], found
    found, _, _ = _run("bug_top", steps=7, only=3)
    assert found == [], found


def test_a_non_finite_local_gradient_is_not_counted():
    found, _, _ = _run("nan", steps=1)
    assert not any(c == "GG102" for c, _ in found), found
