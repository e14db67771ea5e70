"""GG102 for a backward pass made after the step and cleared before the next one.

``zero_grad(); loss_a.backward(); step(); loss_b.backward()``, then the next iteration's
``zero_grad()``: ``loss_b``'s gradient is added on top of the gradient the step had just
applied and is cleared with it, so no update ever applies it (a step placed before the last
backward pass, as in an adversarial segmentation loop). The watch reported only the last
iteration's pass, at the end, as GG103: the steps were fed by the first loss's line, which it
read as a deliberate discard. Each pass is a discard (GG102), reported once systematic.

Reference: plain PyTorch in float64. The parameters after the run equal those of a run
without ``loss_b`` at all (its gradient is never applied), and differ from the fixed order
(step after both passes). Negative controls, silent: the fixed order; a second loss cleared
before it is back-propagated (a pass on cleared buffers, read alone and then dropped, as a
gradient-norm probe); a GAN's generator pass that reaches the discriminator after the
discriminator's step and is cleared there while the generator's step applies it.
"""

from __future__ import annotations

import torch

import gradguard as gg


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 3, generator=g, dtype=torch.float64), torch.randn(8, 1, generator=g, dtype=torch.float64))
            for _ in range(5)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1).double()


def _run(order, watch=True):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ctx = gg.watch(mode="record") if watch else None
    if ctx:
        ctx.__enter__()
    try:
        for x, y in _data():
            opt.zero_grad()
            (model(x) - y).pow(2).mean().backward()
            if order == "bug":
                opt.step()
                (0.5 * model(x).abs().mean()).backward()
            elif order == "fixed":
                (0.5 * model(x).abs().mean()).backward()
                opt.step()
            elif order == "none":
                opt.step()
            elif order == "probe":
                opt.step()
                opt.zero_grad()
                (0.5 * model(x).abs().mean()).backward()
                _ = sum(float(p.grad.norm()) for p in model.parameters())
                opt.zero_grad()
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    return params, ([(f.code, f.step) for f in ctx.findings] if ctx else None)


def test_a_pass_after_the_step_is_never_applied_and_is_reported_once_systematic():
    bug, found = _run("bug")
    none, _ = _run("none", watch=False)
    fixed, _ = _run("fixed", watch=False)
    assert torch.equal(bug, none)  # loss_b's gradient reached no update
    assert not torch.allclose(bug, fixed)
    codes = [c for c, _ in found]
    assert "GG102" in codes  # made after each step, cleared before the next: systematic by the third interval
    assert min(s for c, s in found if c == "GG102") <= 4
    assert set(codes) <= {"GG102", "GG103"}


def test_the_fixed_order_and_a_probe_on_cleared_buffers_stay_silent():
    assert _run("fixed")[1] == []
    assert _run("probe")[1] == []


def test_a_generator_pass_through_the_discriminator_stays_silent():
    torch.manual_seed(0)
    G = torch.nn.Linear(2, 3).double()
    D = torch.nn.Linear(3, 1).double()
    opt_g = torch.optim.SGD(G.parameters(), lr=0.05)
    opt_d = torch.optim.SGD(D.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(2)
    with gg.watch(mode="record") as w:
        for _ in range(5):
            z = torch.randn(8, 2, generator=g, dtype=torch.float64)
            real = torch.randn(8, 3, generator=g, dtype=torch.float64)
            fake = G(z)
            opt_d.zero_grad()
            (D(fake.detach()).mean() - D(real).mean()).backward()
            opt_d.step()
            opt_g.zero_grad()
            (-D(fake).mean()).backward()  # reaches D too, on top of D's applied gradient
            opt_g.step()
    assert [f.code for f in w.findings] == []
