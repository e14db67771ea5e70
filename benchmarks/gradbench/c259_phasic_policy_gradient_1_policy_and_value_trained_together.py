"""Phasic Policy Gradient's policy phase: the test meant to optimize the policy and value objectives separately reads `n_epoch_pi != n_epoch_pi`, which is always false, so the value loss is always added to the policy loss and both are applied in one update of the shared model.

source: openai/phasic-policy-gradient#1 (https://github.com/openai/phasic-policy-gradient/issues/1), "Issue about `n_epoch_pi != n_epoch_pi` in ppo.py": "If n_epoch_pi is not specified, this equation will be false, the value network and policy network will train together ... Whether this equation is typo of `n_epoch_vf != n_epoch_pi`?"; a maintainer: "Yes, you're absolutely right -- this is a bug. Thanks for the info. I just pushed a fix." ppo.py was not read beyond the issue's excerpt; the policy phase is reduced to a clipped-surrogate policy loss and a value loss on a shared trunk with two heads, with n_epoch_pi = 1 and n_epoch_vf = 2 (so the separate path trains the value head on its own epochs). The twin tests `n_epoch_vf != n_epoch_pi`, the issue's reading
family: loss-routing
shape: Adam(lr=3e-3), a shared trunk with policy and value heads, 4 minibatches, n_epoch_pi = 1, n_epoch_vf = 2
numeric: the bug takes 4 joint steps on policy + value loss; the twin takes 4 policy steps and 8 value steps
watch: out: every step applies its own loss's gradient once and clears it; which losses one update should sum is the algorithm's intent
lint: out: which losses are summed is decided by a condition on configuration values at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

n_epoch_pi, n_epoch_vf = 1, 2
_gb.setup()
trunk = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh())
pi_head, vf_head = torch.nn.Linear(32, 3), torch.nn.Linear(32, 1)
model = torch.nn.ModuleDict({"trunk": trunk, "pi": pi_head, "vf": vf_head})
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
batches = []
for _ in range(4):
    obs = torch.randn(16, 6)
    act = torch.randint(0, 3, (16,))
    with torch.no_grad():
        old_logp = torch.log_softmax(pi_head(trunk(obs)), 1).gather(1, act[:, None]).squeeze(1)
    batches.append((obs, act, old_logp, torch.randn(16), torch.randn(16)))


def losses(obs, act, old_logp, adv, ret):
    h = trunk(obs)
    logp = torch.log_softmax(pi_head(h), 1).gather(1, act[:, None]).squeeze(1)
    ratio = (logp - old_logp).exp()
    pi_loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
    vf_loss = 0.5 * F.mse_loss(vf_head(h).squeeze(1), ret)
    return pi_loss, vf_loss


train_separate = n_epoch_pi != n_epoch_pi  # BUG
# FIX: train_separate = n_epoch_vf != n_epoch_pi
if train_separate:
    for _ in range(n_epoch_pi):
        for batch in batches:
            optimizer.zero_grad()
            losses(*batch)[0].backward()
            optimizer.step()
    for _ in range(n_epoch_vf):
        for batch in batches:
            optimizer.zero_grad()
            losses(*batch)[1].backward()
            optimizer.step()
else:
    for _ in range(n_epoch_pi):
        for batch in batches:
            optimizer.zero_grad()
            pi_loss, vf_loss = losses(*batch)
            (pi_loss + vf_loss).backward()
            optimizer.step()
_gb.done(model)
