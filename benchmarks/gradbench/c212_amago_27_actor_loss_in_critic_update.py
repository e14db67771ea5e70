"""AMAGO's shared actor-critic update: the actor loss (maximise the critics' value of the actor's actions) and the critic loss are summed and backpropagated together before one optimizer step, so the actor loss also sends gradient into the critics and their update pushes their outputs up for the actor's actions, where the critics should be fit to the TD targets only.

source: UT-Austin-RPL/amago#27 (https://github.com/UT-Austin-RPL/amago/pull/27), "Alternate Backward" (merged, by the author jakegrigsby): "since the actor's objective is (at least partially) to maximize the outputs of the critics, the critics would be optimized to maximize their outputs for all action inputs ... The fix is to remove the gradients of the TD3/REDQ actor loss from the critics' update. I did this by doing the actor loss `backward` first, retaining the graph, zeroing the critic g[rads]" and then the critic loss's backward. learning.py was not read beyond the pull request's description: the shared sequence model is reduced to a linear trajectory encoder feeding an actor head and a critic head, the critic's action input the actor's (tanh) action for the actor loss and the replay action for the critic loss; one AdamW over all. The twin backpropagates the actor loss first with retain_graph, zeroes the critic's gradients, then backpropagates the critic loss, the pull request's order
family: actor-critic-leak
shape: AdamW(lr=3e-4) over encoder, actor and critic; 6 updates on batches of 16 transitions
numeric: every update moves the critic by the actor loss's gradient as well as the critic loss's
watch: out: which loss should reach which network is the program's intent; every gradient is applied once and cleared (no buffer rule is broken)
lint: out: which networks the actor loss reaches is the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
encoder = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh())
actor = torch.nn.Linear(32, 2)
critic = torch.nn.Sequential(torch.nn.Linear(34, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
_gb.start(encoder, actor, critic)
optimizer = torch.optim.AdamW(list(encoder.parameters()) + list(actor.parameters()) + list(critic.parameters()), lr=3e-4)
batches = [(torch.randn(16, 10), torch.rand(16, 2) * 2 - 1, torch.randn(16, 1)) for _ in range(6)]
for obs, action, td_target in batches:
    state = encoder(obs)
    a_pi = torch.tanh(actor(state))
    actor_loss = -critic(torch.cat([state.detach(), a_pi], 1)).mean()
    critic_loss = F.mse_loss(critic(torch.cat([state, action], 1)), td_target)
    optimizer.zero_grad()
    (actor_loss + critic_loss).backward()  # BUG
    # FIX: actor_loss.backward(retain_graph=True)
    # FIX: critic.zero_grad()
    # FIX: critic_loss.backward()
    optimizer.step()
_gb.done(encoder, actor, critic)
