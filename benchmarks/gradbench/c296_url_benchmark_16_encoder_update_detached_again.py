"""URLB's ICM-APT agent: `update` detaches the encoded observations when `update_encoder` is False, but then passes `obs.detach()` and `next_obs.detach()` to the critic update unconditionally, so during fine-tuning (extrinsic reward, no ICM update) the critic loss never reaches the encoder, even with update_encoder True, and the encoder optimizer steps with no gradient.

source: rll-research/url_benchmark#16 (https://github.com/rll-research/url_benchmark/issues/16), "update_encoder doesn't used." (open): "`update_encoder` parameter detachs obs and next_obs. but after that line, all obs and next_obs are detached again." agent/icm_apt.py was read: `if not self.update_encoder: obs = obs.detach(); next_obs = next_obs.detach()` is followed by `self.update_critic(obs.detach(), action, reward, discount, next_obs.detach(), step)`; DDPGAgent.update_critic (agent/ddpg.py, not read, written as in DrQ-v2) clears encoder_opt and critic_opt, backpropagates the critic loss and steps both. In the reward-free phase update_icm trains the encoder through the ICM loss and frees its graph, so the case follows the fine-tuning phase (reward_free False), where the detach is the only thing between the critic loss and the encoder. The encoder is reduced to an MLP over 24 features, actor and critic to small MLPs, the target critic to a copy updated by soft update; the actor update (on detached observations, as in DDPG) is kept. The twin passes obs and next_obs to the critic update as update_encoder leaves them
family: detached-loss
shape: Adam(lr=1e-4) for encoder, critic and actor, update_encoder True, 5 updates of 32 transitions, 2 actions
numeric: the encoder keeps its initial weights in the bug
watch: GG110
lint: out: a detach inside a call's arguments is the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import copy

import torch
import torch.nn.functional as F

import _gb

update_encoder, discount, tau = True, 0.99, 0.01
_gb.setup()
encoder = torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
actor = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2), torch.nn.Tanh())
critic = torch.nn.Sequential(torch.nn.Linear(18, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
critic_target = copy.deepcopy(critic)
_gb.start(encoder)
encoder_opt = torch.optim.Adam(encoder.parameters(), lr=1e-4)
critic_opt = torch.optim.Adam(critic.parameters(), lr=1e-4)
actor_opt = torch.optim.Adam(actor.parameters(), lr=1e-4)


def update_critic(obs, action, reward, next_obs):
    with torch.no_grad():
        target_q = reward + discount * critic_target(torch.cat([next_obs, actor(next_obs)], 1))
    critic_loss = F.mse_loss(critic(torch.cat([obs, action], 1)), target_q)
    encoder_opt.zero_grad(set_to_none=True)
    critic_opt.zero_grad(set_to_none=True)
    critic_loss.backward()
    critic_opt.step()
    encoder_opt.step()


def update_actor(obs):
    actor_loss = -critic(torch.cat([obs, actor(obs)], 1)).mean()
    actor_opt.zero_grad(set_to_none=True)
    actor_loss.backward()
    actor_opt.step()


for step in range(5):
    obs, action = torch.randn(32, 24), torch.rand(32, 2) * 2 - 1
    extr_reward, next_obs = torch.randn(32, 1), torch.randn(32, 24)
    obs = encoder(obs)
    with torch.no_grad():
        next_obs = encoder(next_obs)
    reward = extr_reward
    if not update_encoder:
        obs = obs.detach()
        next_obs = next_obs.detach()
    update_critic(obs.detach(), action, reward, next_obs.detach())  # BUG
    # FIX: update_critic(obs, action, reward, next_obs)
    update_actor(obs.detach())
    with torch.no_grad():
        for p, tp in zip(critic.parameters(), critic_target.parameters()):
            tp.lerp_(p, tau)
_gb.done(encoder)
