"""Lint GG102 for a backward pass placed after the step it was meant for.

``zero_grad(); seg.backward(); optimizer.step(); adv.backward()`` and the next iteration's
``zero_grad()``: the adversarial pass's gradient, whose loss reaches the stepped module, is added
to the gradient the step already applied and cleared with it: no update applies it (the watch's
GG102, at its first clearing). The oracle is plain PyTorch in float64: the parameters after the
run equal those of the same run without the adversarial pass. Negative controls: the fixed
order; the pass cut by ``detach()`` from the module; a GAN whose generator pass runs through the
discriminator after the discriminator's step (the generator's step applies it); rewrites
(another module name, the discriminator frozen through ``requires_grad_``) keep the verdict.
"""

from __future__ import annotations

import torch

import gradguard as gg

PROGRAM = """
import torch
import torch.nn.functional as F

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
critic = torch.nn.Linear(3, 1).double()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
opt_c = torch.optim.SGD(critic.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
batches = [(torch.randn(4, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (4,), generator=g),
            torch.randn(4, 6, generator=g, dtype=torch.float64)) for _ in range(5)]
for x, y, xt in batches:
    opt.zero_grad()
    opt_c.zero_grad()
    for q in critic.parameters():
        q.requires_grad = False
    pred = net(x)
    loss_seg = F.cross_entropy(pred, y)
    loss_seg.backward()
    opt.step()  # STEP_EARLY
    pred_t = net(xt)
    d_out = critic(F.softmax(pred_t, dim=1))
    loss_adv = 0.5 * F.binary_cross_entropy_with_logits(d_out, torch.zeros_like(d_out))
    loss_adv.backward()  # ADV
    # STEP_LATE
    for q in critic.parameters():
        q.requires_grad = True
    d_src = critic(F.softmax(pred.detach(), dim=1))
    loss_d = F.binary_cross_entropy_with_logits(d_src, torch.ones_like(d_src))
    loss_d.backward()
    opt_c.step()
"""

FIXED = PROGRAM.replace("    opt.step()  # STEP_EARLY\n", "").replace("    # STEP_LATE\n", "    opt.step()\n")
NO_ADV = PROGRAM.replace("    loss_adv.backward()  # ADV\n", "")
DETACHED = PROGRAM.replace("pred_t = net(xt)", "pred_t = net(xt).detach()").replace(
    "    for q in critic.parameters():\n        q.requires_grad = False\n", "")


def _params(source):
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    return torch.cat([p.detach().flatten() for p in scope["net"].parameters()])


def _gg102(source) -> bool:
    return any(f.code == "GG102" for f in gg.lint_source(source))


def test_a_pass_after_the_step_is_discarded_and_reported():
    assert torch.equal(_params(PROGRAM), _params(NO_ADV))  # the adversarial gradient reached no update
    assert not torch.allclose(_params(PROGRAM), _params(FIXED))
    assert _gg102(PROGRAM)


def test_the_fixed_order_and_a_detached_pass_stay_silent():
    assert not _gg102(FIXED)
    assert torch.equal(_params(DETACHED), _params(NO_ADV))  # nothing of it reaches `net`: nothing to lose
    assert not _gg102(DETACHED)


def test_rewrites_keep_the_verdict():
    renamed = PROGRAM.replace("net", "segmenter").replace("critic", "model_D")
    assert _gg102(renamed)
    frozen = PROGRAM.replace("    for q in critic.parameters():\n        q.requires_grad = False\n", "    critic.requires_grad_(False)\n").replace(
        "    for q in critic.parameters():\n        q.requires_grad = True\n", "    critic.requires_grad_(True)\n")
    assert torch.equal(_params(frozen), _params(PROGRAM))
    assert _gg102(frozen)
    assert not _gg102(frozen.replace("    opt.step()  # STEP_EARLY\n", "").replace("    # STEP_LATE\n", "    opt.step()\n"))


GAN = """
import torch

torch.manual_seed(0)
G = torch.nn.Linear(2, 3)
D = torch.nn.Linear(3, 1)
opt_g = torch.optim.SGD(G.parameters(), lr=0.05)
opt_d = torch.optim.SGD(D.parameters(), lr=0.05)
for _ in range(5):
    z, real = torch.randn(8, 2), torch.randn(8, 3)
    fake = G(z)
    opt_d.zero_grad()
    loss_d = D(fake.detach()).mean() - D(real).mean()
    loss_d.backward()
    opt_d.step()
    opt_g.zero_grad()
    loss_g = -D(fake).mean()
    loss_g.backward()
    opt_g.step()
"""


def test_a_generator_pass_through_the_discriminator_stays_silent():
    # loss_g reaches D after D's step and D's next zero_grad clears it, but G's step applies the pass
    assert not _gg102(GAN)


ACTOR_CRITIC = """
import torch

torch.manual_seed(0)
critic = torch.nn.Linear(4, 1)
actor = torch.nn.Linear(4, 3)
critic_optim = torch.optim.Adam(critic.parameters(), lr=5e-3)
actor_optim = torch.optim.Adam(actor.parameters(), lr=1e-3)


def get_losses(log_probs, values, rewards):
    advantages = rewards - values
    return advantages.pow(2).mean(), -(advantages.detach() * log_probs).mean()


for _ in range(4):
    obs = torch.randn(8, 4)
    dist = torch.distributions.Categorical(logits=actor(obs))
    values = critic(obs).squeeze(-1)
    critic_loss, actor_loss = get_losses(dist.log_prob(dist.sample()), values, torch.randn(8))
    critic_optim.zero_grad()
    critic_loss.backward()
    critic_optim.step()
    actor_optim.zero_grad()
    actor_loss.backward()
    actor_optim.step()
"""


def test_a_loss_returned_by_a_helper_is_not_taken_to_reach_the_module():
    # the actor's loss comes from a function of the file that detaches the advantages: it does not
    # reach the critic, and what the function returns is not followed, so nothing is claimed
    scope: dict = {}
    exec(compile(ACTOR_CRITIC, "<program>", "exec"), scope)
    assert not _gg102(ACTOR_CRITIC)
