"""Gymnasium A2C tutorial (get_losses): the critic loss is `advantages.pow(2).mean()` on GAE advantages computed from `value_preds` with gradients enabled, so the critic's gradient runs back through the whole bootstrapped chain (value_preds[t] and value_preds[t + 1] inside every TD error and the recursion) instead of regressing V on a fixed target.

source: Farama-Foundation/Gymnasium#1494 (https://github.com/Farama-Foundation/Gymnasium/issues/1494), "[Bug Report] Incorrect A2C implementation" (labelled bug, closed): "The critical bug is that you use advantages as the critic target without detaching it, so the critic loss backpropagates through the GAE computation itself (i.e., through value_preds[t] and value_preds[t+1] inside td_error and the recursion). Concretely, advantages is computed from value_preds with gradients enabled, then critic_loss = advantages.pow(2).mean() sends gradients back through that whole bootstrapped chain. This is not the intended value-function regression (you want to regress V to a fixed target)." The tutorial's loop as quoted: for t in reversed(range(T - 1)): td_error = rewards[t] + gamma * masks[t] * value_preds[t + 1] - value_preds[t]; gae = td_error + gamma * lam * masks[t] * gae; advantages[t] = gae; critic_loss = advantages.pow(2).mean(); actor_loss = -(advantages.detach() * action_log_probs).mean() - ent_coef * entropy.mean(). The networks are reduced to small MLPs over random observations of 2 parallel environments. The twin regresses the values on the detached targets (advantages + value_preds).detach(), the fixed target the issue asks for
family: actor-critic-leak
shape: critic Adam(lr=5e-3), actor Adam(lr=1e-3); T = 8 steps, 2 envs, gamma = 0.99, lam = 0.95; 4 updates
numeric: the critic's update differs from the regression on fixed targets
watch: out: which loss should reach which value is the program's intent; every gradient is applied once and cleared
lint: out: a missing detach inside a loss expression is the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch

import _gb

obs_dim, n_actions, n_envs, T = 4, 3, 2, 8
gamma, lam, ent_coef = 0.99, 0.95, 0.01

_gb.setup()
critic = torch.nn.Sequential(torch.nn.Linear(obs_dim, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
actor = torch.nn.Sequential(torch.nn.Linear(obs_dim, 16), torch.nn.ReLU(), torch.nn.Linear(16, n_actions))
_gb.start(critic, actor)
critic_optim = torch.optim.Adam(critic.parameters(), lr=5e-3)
actor_optim = torch.optim.Adam(actor.parameters(), lr=1e-3)


def get_losses(rewards, action_log_probs, value_preds, entropy, masks):
    advantages = torch.zeros(T, n_envs)
    gae = 0.0
    for t in reversed(range(T - 1)):
        td_error = rewards[t] + gamma * masks[t] * value_preds[t + 1] - value_preds[t]
        gae = td_error + gamma * lam * masks[t] * gae
        advantages[t] = gae
    critic_loss = advantages.pow(2).mean()  # BUG
    # FIX: critic_loss = (value_preds - (advantages + value_preds).detach()).pow(2).mean()
    actor_loss = -(advantages.detach() * action_log_probs).mean() - ent_coef * entropy.mean()
    return critic_loss, actor_loss


for update in range(4):
    obs = torch.randn(T, n_envs, obs_dim)
    dist = torch.distributions.Categorical(logits=actor(obs))
    actions = dist.sample()
    value_preds = critic(obs).squeeze(-1)
    rewards, masks = torch.randn(T, n_envs), (torch.rand(T, n_envs) > 0.1).to(obs.dtype)
    critic_loss, actor_loss = get_losses(rewards, dist.log_prob(actions), value_preds, dist.entropy(), masks)
    critic_optim.zero_grad()
    critic_loss.backward()
    critic_optim.step()
    actor_optim.zero_grad()
    actor_loss.backward()
    actor_optim.step()
_gb.done(critic, actor)
