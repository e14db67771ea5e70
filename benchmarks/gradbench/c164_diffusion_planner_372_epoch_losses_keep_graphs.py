"""Diffusion-Planner train_epoch: each batch's loss tensor is appended to `epoch_loss` before being reduced at the end of the epoch, so every batch's autograd graph (its saved activations) stays alive until the epoch ends.

source: tier4/Diffusion-Planner#372 (https://github.com/tier4/Diffusion-Planner/pull/372), "fix(train_epoch): release per-batch loss graphs during training": "Convert each per-batch loss value to a detached Python scalar before appending it to epoch_loss. Prevent loss tensors and their autograd graphs from being retained until the end of an epoch. Preserve the existing epoch-level loss and metric aggregation behavior." The pull request was closed without merge. The code was not read: the loop follows the description (loss = model loss; optimizer.zero_grad(); loss.backward(); optimizer.step(); epoch_loss.append(loss); at the end the mean of epoch_loss); the planner is reduced to a small MLP regressor of future positions. The twin appends loss.item()
family: graph-logging
shape: AdamW(lr=1e-3); one epoch of 8 batches of 32
numeric: the 8 batch graphs stay alive to the end of the epoch
watch: out: a logging list holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
epoch_loss = []
for batch in range(8):
    x, y = torch.randn(32, 24), torch.randn(32, 16)
    loss = F.smooth_l1_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    epoch_loss.append(loss)  # BUG
    # FIX: epoch_loss.append(loss.item())
_gb.done(model, kept=[v for v in epoch_loss if isinstance(v, torch.Tensor)])
epoch_mean = sum(epoch_loss) / len(epoch_loss)
