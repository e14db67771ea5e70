"""CoursIA PT-10 (GAE from scratch): `rollout()` collects the value head's outputs with `values.append(value.item())`, so the value loss `F.mse_loss(values_t, returns)` built from those numbers has no graph (`requires_grad=False`, `grad_fn=None`) and the critic head never receives a gradient: it stays at its initialisation while the comparison it is meant to support runs.

source: jsboige/CoursIA#15256 (https://github.com/jsboige/CoursIA/pull/15256), "fix(genai,#15035): PT-10 dead critic — value loss detached from the graph, critic never trained" (merged): "rollout() / rollout_ms() collectaient values.append(value.item()) : valeurs détachées du graphe. Dans train_gae / train_gae_ms, v_loss = F.mse_loss(values_t, returns) avait donc requires_grad=False, grad_fn=None — le critic head (Linear(64,1), 65 params) ne recevait aucun gradient, poids strictement inchangés (critic_weight_delta = 0.00e+00 sur chaque epoch ...)". The notebook was not read beyond the description: a shared body with a policy head and a Linear(64, 1) value head; per episode the policy-gradient loss with GAE advantages plus the value loss, one backward, one Adam step. Random observations stand in for the environment. The twin keeps the value tensors (values.append(value)), as the fix does
family: detached-loss
shape: body Linear(6, 64) + tanh, policy head Linear(64, 3), value head Linear(64, 1); Adam(lr=1e-2); 4 episodes of 10 steps; loss = pg_loss + 0.5 * v_loss
numeric: the value head never moves (its update is 0); the body's update also lacks the value loss's share
watch: out: a parameter the loss never reaches has no gradient to check; no gradient is stale, lost or applied twice
lint: GG203
scope-history: lint declared out when the case was written ("which tensors the loss is built from (a number from .item() or the tensor) is the loss's definition, not the gradient buffer's handling"); re-declared GG203 after the rule was written from this family's cases (in-sample from then on)
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class ActorCritic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 64), torch.nn.Tanh())
        self.pi = torch.nn.Linear(64, 3)
        self.v = torch.nn.Linear(64, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


def rollout(model, steps=10):
    log_probs, values, rewards = [], [], []
    for _ in range(steps):
        logits, value = model(torch.randn(6))
        dist = torch.distributions.Categorical(logits=logits)
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        values.append(value.item())  # BUG
        # FIX: values.append(value)
        rewards.append(float(action == 1) + 0.1 * torch.randn(()).item())
    return log_probs, values, rewards


_gb.setup()
model = ActorCritic()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
gamma, lam = 0.99, 0.95
for episode in range(4):
    log_probs, values, rewards = rollout(model)
    values_t = torch.stack([torch.as_tensor(v) for v in values])
    returns, adv, gae = [], [], 0.0
    v_next = 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * v_next - float(values_t[t])
        gae = delta + gamma * lam * gae
        adv.insert(0, gae)
        returns.insert(0, gae + float(values_t[t]))
        v_next = float(values_t[t])
    adv_t, returns_t = torch.tensor(adv), torch.tensor(returns)
    pg_loss = -(torch.stack(log_probs) * adv_t).mean()
    v_loss = F.mse_loss(values_t, returns_t)
    loss = pg_loss + 0.5 * v_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(model)
