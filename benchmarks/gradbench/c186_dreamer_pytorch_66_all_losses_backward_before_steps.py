"""dreamer-pytorch update: the world-model, actor and value losses are computed from one imagined rollout, all three optimizers are cleared, all three losses are backpropagated, and then all three optimizers step; the actor loss runs through the world model's dynamics (Dreamer backpropagates through the imagined trajectories), so the world model's step also applies the actor loss's gradient.

source: juliusfrost/dreamer-pytorch#66 (https://github.com/juliusfrost/dreamer-pytorch/pull/66), "Fix with multiple optimizers" (merged by the author): "I did a short experiment that showed that the order of updates (zerograd(), backward(), step()) matters when using multiple optimizers and multiple losses ... As such I changed the update order to fix optimization". The code was not read: the update follows the description (model/actor/value zero_grad; model_loss, actor_loss, value_loss backward; three steps); the RSSM is reduced to a linear-tanh latent transition with a reward head trained on observed transitions, the actor to a tanh MLP, the value to an MLP on detached imagined states; imagination horizon 5. The twin keeps the world model's parameters out of the actor loss's backward (requires_grad off while imagining, the gradient still flows through the dynamics to the actor), one way to get what the reordered updates give: a world-model step on the model loss alone
family: actor-critic-leak
shape: model Adam(lr=1e-3), actor Adam(lr=8e-5), value Adam(lr=8e-5); batch 16, horizon 5, 4 updates
numeric: every world-model update includes the actor loss's gradient through the imagined dynamics
watch: out: which loss should reach which network is the program's intent; every gradient is applied once and cleared (no buffer rule is broken)
lint: out: which networks the actor loss reaches is the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class WorldModel(torch.nn.Module):
    def __init__(self, s=8, a=2):
        super().__init__()
        self.transition = torch.nn.Linear(s + a, s)
        self.reward = torch.nn.Linear(s, 1)

    def step(self, state, action):
        return torch.tanh(self.transition(torch.cat([state, action], -1)))


_gb.setup()
model = WorldModel()
actor = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ELU(), torch.nn.Linear(16, 2), torch.nn.Tanh())
value = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ELU(), torch.nn.Linear(16, 1))
_gb.start(model, actor, value)
model_optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
actor_optimizer = torch.optim.Adam(actor.parameters(), lr=8e-5)
value_optimizer = torch.optim.Adam(value.parameters(), lr=8e-5)
for update in range(4):
    s, a = torch.randn(16, 8), torch.rand(16, 2) * 2 - 1
    s_next, r = torch.tanh(torch.randn(16, 8)), torch.randn(16, 1)
    model_loss = F.mse_loss(model.step(s, a), s_next) + F.mse_loss(model.reward(s_next), r)
    # FIX: model.requires_grad_(False)
    state, returns = s_next.detach(), 0.0
    imag_states = []
    for t in range(5):
        state = model.step(state, actor(state))
        imag_states.append(state)
        returns = returns + 0.99 ** t * model.reward(state)
    # FIX: model.requires_grad_(True)
    value.requires_grad_(False)  # the bootstrap value reaches the actor, not the value net
    actor_loss = -(returns + 0.99 ** 5 * value(state)).mean()
    value.requires_grad_(True)
    imag = torch.stack(imag_states).detach()
    value_loss = F.mse_loss(value(imag[:-1]), (returns.detach() / 5).expand(4, 16, 1))
    model_optimizer.zero_grad()
    actor_optimizer.zero_grad()
    value_optimizer.zero_grad()
    model_loss.backward()
    actor_loss.backward()
    value_loss.backward()
    model_optimizer.step()
    actor_optimizer.step()
    value_optimizer.step()
_gb.done(model, actor, value)
