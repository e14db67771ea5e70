"""Training example that sums the loss tensor itself into a running total.

source: google/brax#152 (https://github.com/google/brax/pull/152), "Remove 'memory leak' in PyTorch training example", citing the PyTorch FAQ ("Don't accumulate history across your training loop ... total_loss += loss")
family: graph-logging
shape: total_loss += loss after backward and step, for logging
numeric: total_loss carries an autograd node per iteration: a chain that grows by one node per step for the whole run (the activations are freed by backward, the graph nodes are not)
watch: out: no gradient is wrong; the run-time watch checks .grad buffers, not logging tensors
lint: GG201
bug-step: end
"""
import torch

import _gb

_gb.setup()
policy = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
_gb.start(policy)
total_loss = 0
for i in range(50):
    optimizer.zero_grad()
    obs, target = torch.randn(16, 8), torch.randn(16, 2)
    loss = ((policy(obs) - target) ** 2).mean()
    loss.backward()
    optimizer.step()
    total_loss += loss  # BUG
    # FIX: total_loss += float(loss)
_gb.done(policy, kept=total_loss)
