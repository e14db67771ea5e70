"""PAAC.pytorch (parallel advantage actor-critic): the training loop adds each update's loss Variable to `loss_sum` for reporting instead of its value, so the sum keeps every update's autograd graph and that memory is freed only when the sum is reset.

source: qbx2/PAAC.pytorch#1 (https://github.com/qbx2/PAAC.pytorch/issues/1), "Too late memory free" (the author's own issue, open): "loss_sum is added by Variable, its related memory is not freed. loss_sum should be added by variable.data[0]". The repository's paac.py was not read; the loop is an advantage actor-critic update (policy-gradient, value and entropy terms over a rollout of n-step returns) with a shared network on random observations, and loss_sum reported every 8 updates as the issue describes. The twin adds the loss's value (.item(), today's variable.data[0])
family: graph-logging
shape: RMSprop(lr=7e-4), 8 updates on rollouts of 5 steps x 4 environments (obs 10, 3 actions)
numeric: loss_sum holds all 8 updates' graphs when it is reported
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class ActorCritic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(10, 64), torch.nn.ReLU())
        self.policy, self.value = torch.nn.Linear(64, 3), torch.nn.Linear(64, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.policy(h), self.value(h).squeeze(-1)


_gb.setup()
net = ActorCritic()
_gb.start(net)
optimizer = torch.optim.RMSprop(net.parameters(), lr=7e-4, alpha=0.99, eps=0.1)
gamma, loss_sum = 0.99, 0.0
for update in range(8):
    obs, actions = torch.randn(5, 4, 10), torch.randint(0, 3, (5, 4))
    rewards = torch.randn(5, 4)
    logits, values = net(obs)
    returns, R = torch.zeros(5, 4), values[-1].detach()
    for t in reversed(range(5)):
        R = rewards[t] + gamma * R
        returns[t] = R
    log_probs = F.log_softmax(logits, -1)
    advantages = returns - values
    policy_loss = -(log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1) * advantages.detach()).mean()
    value_loss = advantages.pow(2).mean()
    entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    loss = policy_loss + 0.5 * value_loss - 0.01 * entropy
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 40.0)
    optimizer.step()
    loss_sum += loss  # BUG
    # FIX: loss_sum += loss.item()
_gb.done(net, kept=[loss_sum] if torch.is_tensor(loss_sum) else [])
