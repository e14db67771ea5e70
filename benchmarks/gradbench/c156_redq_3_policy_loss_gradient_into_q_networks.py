"""REDQ (concurrent update): the Q losses and the policy loss are computed from the same batch, both backpropagated, and then the Q optimizers and the policy optimizer step; the policy loss goes through the Q networks (Q(s, pi(s))) while their gradients are kept, so each Q network's update also applies the policy loss's gradient (pushing Q up at the policy's actions).

source: watchernyu/REDQ#3 (https://github.com/watchernyu/REDQ/pull/3), "Avoid policy loss gradients feeding back into Q networks" (merged): "I realized that in my previous pull request there was a bug affecting the behavior: the gradient from the policy update would also be used in the q networks update. This fixes the problem while still updating all networks concurrently." The maintainer (watchernyu): "Thanks for pointing out the issue, indeed changing the structure would allow policy loss to add additional gradients to Q network parameters." The code was not read: the update follows the description (q_loss.backward(); policy_loss.backward(); q_optimizer.step(); policy_optimizer.step(), all zero_grad first); the SAC networks are reduced to two small Q MLPs and a deterministic tanh policy with a fixed entropy term. The twin stops the Q parameters' gradients during the policy loss (requires_grad off and on), one way to do what the fix describes
family: actor-critic-leak
shape: 2 Q networks Adam(lr=3e-3), policy Adam(lr=3e-3); batch of 32 transitions, 5 updates; q target from rewards + 0.99 * min Q(s', pi(s')) under no_grad
numeric: every Q update includes -dQ(s, pi(s))/dtheta_Q from the policy loss
watch: out: which loss should reach which network is the program's intent; every gradient is applied once and cleared (no buffer rule is broken)
lint: out: which networks the policy loss reaches is the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

obs_dim, act_dim = 5, 2


def mlp(i, o):
    return torch.nn.Sequential(torch.nn.Linear(i, 32), torch.nn.ReLU(), torch.nn.Linear(32, o))


_gb.setup()
q_nets = torch.nn.ModuleList([mlp(obs_dim + act_dim, 1) for _ in range(2)])
policy = mlp(obs_dim, act_dim)
_gb.start(q_nets, policy)
q_optimizer = torch.optim.Adam(q_nets.parameters(), lr=3e-3)
policy_optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
for it in range(5):
    obs, obs2 = torch.randn(32, obs_dim), torch.randn(32, obs_dim)
    act, rew = torch.rand(32, act_dim) * 2 - 1, torch.randn(32, 1)
    with torch.no_grad():
        a2 = torch.tanh(policy(obs2))
        target = rew + 0.99 * torch.min(*[q(torch.cat([obs2, a2], 1)) for q in q_nets])
    q_loss = sum(F.mse_loss(q(torch.cat([obs, act], 1)), target) for q in q_nets)
    pi_action = torch.tanh(policy(obs))
    # FIX: q_nets.requires_grad_(False)
    q_pi = torch.min(*[q(torch.cat([obs, pi_action], 1)) for q in q_nets])
    policy_loss = (0.2 * pi_action.pow(2).sum(1, keepdim=True) - q_pi).mean()
    # FIX: q_nets.requires_grad_(True)
    q_optimizer.zero_grad()
    policy_optimizer.zero_grad()
    q_loss.backward()
    policy_loss.backward()
    q_optimizer.step()
    policy_optimizer.step()
_gb.done(q_nets, policy)
