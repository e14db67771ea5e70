"""tntorch optimize(): the loss history list keeps every iteration's whole computational graph.

source: rballester/tntorch#19 (https://github.com/rballester/tntorch/pull/19), "Fixed errors on GPU. Removed annoying memory leak.": "There was a dangerous memory leak in loss_history. Every added loss used to be a full computational graph" (merged)
family: graph-logging
shape: optimize(tensors, loss_function, ...): for each iteration: optimizer.zero_grad(); loss = loss_function(*tensors); loss.backward(); optimizer.step(); loss_history.append(loss)
numeric: loss_history holds one graph root per iteration (nodes only: backward freed the saved activations)
watch: out: a logging list holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch

import _gb

_gb.setup()
core = torch.nn.Parameter(torch.randn(4, 3, 4) * 0.5)
target = torch.randn(4, 4)
_gb.start(core)
optimizer = torch.optim.Adam([core], lr=1e-2)
loss_history = []
for it in range(8):
    optimizer.zero_grad()
    full = torch.einsum("irj,jsk->irsk", core, core).sum((1, 2))
    loss = torch.nn.functional.mse_loss(full, target)
    loss.backward()
    optimizer.step()
    loss_history.append(loss)  # BUG
    # FIX: loss_history.append(loss.item())
_gb.done(core, kept=loss_history)
