"""TRL's PPOTrainer: the per-minibatch training statistics (losses, entropy, value predictions, ...) were stored in the stats it collects over the PPO epochs as tensors still attached to the autograd graph, so every minibatch's graph stayed referenced until the statistics were reduced at the end of the step, an overuse of memory.

source: huggingface/trl#220 (https://github.com/huggingface/trl/pull/220), "Grad accumulation and memory bugfix" (merged): "Fixes tensors not being detached from graph when stored in stats, leading to an overuse of memory." ppo_trainer.py was not read; the step is written out as its loop over PPO epochs and minibatches (loss, backward, step, the minibatch's stats dict appended to all_stats) with a clipped policy-gradient loss and a value loss of a small policy-value network on a random rollout, and the stats reduced by stacking at the end of the step. The twin detaches the stats, as the fix does
family: graph-logging
shape: Adam(lr=1e-4), one step of 2 PPO epochs over 4 minibatches of 8 (obs 6, 4 actions)
numeric: all_stats holds all 8 minibatches' graphs until the step's statistics are reduced
watch: out: the stats hold graph nodes, not gradient; the watch follows .grad
lint: out: the tensors are kept by a list append of dicts inside the trainer, not an arithmetic sum in the loop
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb

cliprange = 0.2
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
obs, actions = torch.randn(32, 6), torch.randint(0, 4, (32,))
with torch.no_grad():
    old_logprobs = torch.log_softmax(model(obs)[:, :4], -1).gather(1, actions[:, None]).squeeze(1)
advantages, returns = torch.randn(32), torch.randn(32)
all_stats = []
for ppo_epoch in range(2):
    for idx in torch.arange(32).chunk(4):
        out = model(obs[idx])
        logp_all = torch.log_softmax(out[:, :4], -1)
        logprobs = logp_all.gather(1, actions[idx, None]).squeeze(1)
        ratio = torch.exp(logprobs - old_logprobs[idx])
        pg_loss = torch.max(-advantages[idx] * ratio,
                            -advantages[idx] * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)).mean()
        vf_loss = 0.5 * F.mse_loss(out[:, 4], returns[idx])
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        optimizer.zero_grad()
        (pg_loss + 0.1 * vf_loss).backward()
        optimizer.step()
        stats = {"loss/policy": pg_loss, "loss/value": vf_loss, "policy/entropy": entropy, "ppo/val/vpred": out[:, 4]}
        # FIX: stats = {k: v.detach() for k, v in stats.items()}
        all_stats.append(stats)
_gb.done(model, kept=[v for s in all_stats for v in s.values()])
train_stats = {k: torch.stack([s[k].mean() for s in all_stats]).mean() for k in all_stats[0]}
