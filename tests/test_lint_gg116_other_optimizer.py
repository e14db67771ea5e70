"""GG116 for a clip of the other network's parameters (Adv-Makeup: after the generator's loss is
back-propagated, ``clip_grad_norm_(self.dis.parameters(), 5)`` where the generator's are meant, then the
generator's step): the clipped discriminator gradient is cleared before the discriminator's next step, and the
generator's step applies its gradient unclipped.

Oracle: plain PyTorch in float64, the GAN loop with the generator's gradient clipped at 5 before its step.
Programs the linter reports must differ from it; the fixed forms must match it. Forms: inline, a trainer
class with its networks and optimizers as attributes, ``clip_grad_value_``; negative controls: the clip of the
generator (the fix), and a clip of the discriminator that its own later step does apply.
"""

import textwrap

import pytest
import torch

import gradguard as gg

PRELUDE = """
import torch
import torch.nn.functional as F
from torch import nn
torch.manual_seed(0)
gen = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 6)).double()
dis = nn.Sequential(nn.Linear(6, 12), nn.LeakyReLU(0.2), nn.Linear(12, 1)).double()
g = torch.Generator().manual_seed(7)
batches = [(20 * torch.randn(8, 6, generator=g, dtype=torch.float64), 20 * torch.randn(8, 6, generator=g, dtype=torch.float64)) for _ in range(4)]
"""

LOOP = """
gen_opt = torch.optim.SGD(gen.parameters(), lr=0.01)
dis_opt = torch.optim.SGD(dis.parameters(), lr=0.01)
for src, real in batches:
    dis_opt.zero_grad()
    d_loss = F.softplus(-dis(real)).mean() + F.softplus(dis(gen(src))).mean()
    d_loss.backward()
    dis_opt.step()
    gen_opt.zero_grad()
    fake = gen(src)
    g_loss = F.softplus(-dis(fake)).mean() + F.mse_loss(fake, real)
    g_loss.backward()
    {clip}
    gen_opt.step()
"""

# name -> (GG116 expected, program after the prelude)
PROGRAMS = {
    "inline": (True, LOOP.format(clip="torch.nn.utils.clip_grad_norm_(dis.parameters(), 5)")),
    "clip_value": (True, LOOP.format(clip="nn.utils.clip_grad_value_(dis.parameters(), clip_value=0.05)")),
    "trainer_class": (True, """
class Gan:
    def __init__(self, generator, discriminator):
        self.G, self.D = generator, discriminator
        self.opt_g = torch.optim.SGD(self.G.parameters(), lr=0.01)
        self.opt_d = torch.optim.SGD(self.D.parameters(), lr=0.01)

    def train(self, data):
        for src, real in data:
            self.opt_d.zero_grad()
            (F.softplus(-self.D(real)).mean() + F.softplus(self.D(self.G(src))).mean()).backward()
            self.opt_d.step()
            self.opt_g.zero_grad()
            fake = self.G(src)
            (F.softplus(-self.D(fake)).mean() + F.mse_loss(fake, real)).backward()
            torch.nn.utils.clip_grad_norm_(self.D.parameters(), max_norm=5)
            self.opt_g.step()

Gan(gen, dis).train(batches)
"""),
    "fixed": (False, LOOP.format(clip="torch.nn.utils.clip_grad_norm_(gen.parameters(), 5)")),
}


def _reference() -> list:
    """Plain PyTorch: the discriminator's step, then the generator's step on its gradient clipped at 5."""
    ns: dict = {}
    exec(PRELUDE, ns)
    gen, dis, batches = ns["gen"], ns["dis"], ns["batches"]
    sp = torch.nn.functional.softplus
    for src, real in batches:
        for p in dis.parameters():
            p.grad = None
        (sp(-dis(real)).mean() + sp(dis(gen(src))).mean()).backward()
        with torch.no_grad():
            for p in dis.parameters():
                p -= 0.01 * p.grad
        for p in gen.parameters():
            p.grad = None
        fake = gen(src)
        (sp(-dis(fake)).mean() + torch.nn.functional.mse_loss(fake, real)).backward()
        grads = [p.grad for p in gen.parameters()]
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(q) for q in grads]))
        with torch.no_grad():
            for p in gen.parameters():
                p -= 0.01 * p.grad * min(1.0, 5 / (float(total) + 1e-6))
    return [p.detach().clone() for p in [*gen.parameters(), *dis.parameters()]]


def _run(body: str) -> list:
    ns: dict = {}
    exec(compile(PRELUDE + textwrap.dedent(body), "<gg116>", "exec"), ns)
    return [p.detach().clone() for p in [*ns["gen"].parameters(), *ns["dis"].parameters()]]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_form_against_the_clipped_generator(name):
    reported, body = PROGRAMS[name]
    gap = max(float((a - b).abs().max()) for a, b in zip(_run(body), _reference()))
    codes = [f.code for f in gg.lint_source(PRELUDE + textwrap.dedent(body), "train.py")]
    if reported:
        assert gap > 1e-3, f"{name}: the generator's unclipped steps must differ from the clipped ones"
        assert codes == ["GG116"], (name, codes)
    else:
        assert gap < 1e-10, name
        assert codes == [], (name, codes)


def test_a_clip_the_discriminators_own_later_step_applies_is_not_reported():
    # the same clip of the discriminator after the generator's pass, then a discriminator step: it is applied
    body = """
gen_opt = torch.optim.SGD(gen.parameters(), lr=0.01)
dis_opt = torch.optim.SGD(dis.parameters(), lr=0.01)
for src, real in batches:
    gen_opt.zero_grad()
    dis_opt.zero_grad()
    fake = gen(src)
    (F.softplus(-dis(fake)).mean() + F.softplus(dis(real)).mean()).backward()
    torch.nn.utils.clip_grad_norm_(dis.parameters(), 5)
    gen_opt.step()
    dis_opt.step()
"""
    assert "GG116" not in [f.code for f in gg.lint_source(PRELUDE + textwrap.dedent(body), "train.py")]
