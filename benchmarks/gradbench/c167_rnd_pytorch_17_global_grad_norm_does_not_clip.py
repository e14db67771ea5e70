"""random-network-distillation-pytorch agents.py: the PPO update calls `global_grad_norm_(list(self.model.parameters()) + list(self.rnd.predictor.parameters()))` where gradient clipping is meant, but that helper only computes the total norm: it takes no clip value and does not modify the gradients, so every update applies the unclipped gradient.

source: jcwleo/random-network-distillation-pytorch#17 (https://github.com/jcwleo/random-network-distillation-pytorch/issues/17), "global_grad_norm_ has no effect". The author (jcwleo): "Could you briefly explain why this doesn't work?"; the reporter (shuang-liu): "As far as I can tell, this function (1) does not take clip_grad_norm as input (2) does not modify the gradients". The issue is open. agents.py was not read: the helper is written as the reporter describes (sum of the gradients' squared norms, square root, returned), called between loss.backward() and optimizer.step() in the PPO + RND update; the networks are reduced to small MLPs, the PPO objective to its clipped surrogate on random rollouts plus the value and RND losses. The twin clips with torch.nn.utils.clip_grad_norm_ at the configured max_grad_norm = 0.5 (the agent's clip_grad_norm setting)
family: clip-misplaced
shape: Adam(lr=1e-4) on policy/value and the RND predictor; max_grad_norm = 0.5; 6 minibatch updates of 32
numeric: every update uses the unclipped gradient (norm well above 0.5)
watch: out: no clip runs at all; a norm computed and thrown away leaves nothing in the gradient buffers to check
lint: out: a helper named like a clip that only reads the norm is the helper's code; no rule reads what a helper does with the gradients
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


def global_grad_norm_(parameters, norm_type=2):
    parameters = [p for p in parameters if p.grad is not None]
    total_norm = 0.0
    for p in parameters:
        total_norm += p.grad.detach().norm(norm_type).item() ** norm_type
    return total_norm ** (1.0 / norm_type)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))  # 4 logits + value
predictor = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
target = torch.nn.Linear(16, 8)
_gb.start(model, predictor)
optimizer = torch.optim.Adam(list(model.parameters()) + list(predictor.parameters()), lr=1e-4)
max_grad_norm, ppo_eps = 0.5, 0.1
for update in range(6):
    obs = 3 * torch.randn(32, 16)
    actions = torch.randint(0, 4, (32,))
    old_logp = torch.log_softmax(torch.randn(32, 4), -1).gather(1, actions[:, None]).squeeze(1)
    adv, returns = 5 * torch.randn(32), 10 * torch.randn(32)
    out = model(obs)
    logp = torch.log_softmax(out[:, :4], -1).gather(1, actions[:, None]).squeeze(1)
    ratio = torch.exp(logp - old_logp)
    actor_loss = -torch.min(ratio * adv, torch.clamp(ratio, 1 - ppo_eps, 1 + ppo_eps) * adv).mean()
    critic_loss = F.mse_loss(out[:, 4], returns)
    forward_loss = F.mse_loss(predictor(obs), target(obs).detach())
    loss = actor_loss + 0.5 * critic_loss + forward_loss
    optimizer.zero_grad()
    loss.backward()
    global_grad_norm_(list(model.parameters()) + list(predictor.parameters()))  # BUG
    # FIX: torch.nn.utils.clip_grad_norm_(list(model.parameters()) + list(predictor.parameters()), max_grad_norm)
    optimizer.step()
_gb.done(model, predictor)
