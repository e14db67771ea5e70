"""rl_lib's pixel PPO: after the PPO loss's backward pass the update clips `self.model_old.parameters()`, the frozen copy that computes the old log-probabilities and never receives a gradient, instead of `self.model.parameters()`, so the network that is stepped is never clipped.

source: DarylRodrigo/rl_lib#10 (https://github.com/DarylRodrigo/rl_lib/pull/10), merged: it changes the clip in PPOPixel's update from model_old to model (only the pull request was read). The CNN actor-critic is reduced to an MLP over 16 features with a 4-action policy head and a value head; the old policy is a deep copy evaluated under no_grad, as PPO does; the optimizer is written as SGD (the repository's was not read: under Adam a rescale of the whole gradient mostly cancels out). The twin clips the trained model
family: clip-misplaced
shape: SGD(lr=0.01), max_grad_norm 0.5, 4 epochs over one rollout of 32 with large advantages and returns
numeric: the bug's updates use the unclipped gradient (its norm is well above 0.5)
watch: out: the clip runs on parameters that have no gradient and that no optimizer holds; the watch checks where clips fall against backward passes and steps of the same parameters
lint: out: which network's parameters a clip should receive is the program's intent
bug-step: 1
"""
import copy

import torch

import _gb


class ActorCritic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh())
        self.pi, self.v = torch.nn.Linear(32, 4), torch.nn.Linear(32, 1)

    def forward(self, x):
        h = self.body(x)
        return torch.distributions.Categorical(logits=self.pi(h)), self.v(h).squeeze(1)


max_grad_norm, eps_clip = 0.5, 0.2
_gb.setup()
model = ActorCritic()
model_old = copy.deepcopy(model)
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
states, actions = torch.randn(32, 16), torch.randint(0, 4, (32,))
returns = 10 * torch.randn(32)
with torch.no_grad():
    dist_old, values_old = model_old(states)
    old_logp = dist_old.log_prob(actions)
advantages = returns - values_old
for epoch in range(4):
    dist, values = model(states)
    ratio = torch.exp(dist.log_prob(actions) - old_logp)
    surr = torch.min(ratio * advantages, ratio.clamp(1 - eps_clip, 1 + eps_clip) * advantages)
    loss = -surr.mean() + 0.5 * (returns - values).pow(2).mean() - 0.01 * dist.entropy().mean()
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model_old.parameters(), max_grad_norm)  # BUG
    # FIX: torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
_gb.done(model)
