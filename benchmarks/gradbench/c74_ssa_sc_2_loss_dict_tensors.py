"""SSA-SC (inherited from LMSCNet): the per-key training losses are summed as tensors for logging, so memory keeps rising.

source: jokester-zzz/SSA-SC#2 (https://github.com/jokester-zzz/SSA-SC/issues/2), "Continuous rising of GPU memory": "The way of updating training and validation loss results in the continuous rising of gpu memory such as loss[key] it should be loss[key].item()"; the author agreed ("changing to loss[key].item() would be more elegant and reasonable")
family: graph-logging
shape: loss = model.compute_loss(scores, data) (a dict with 'total' and per-scale terms); loss['total'].backward(); optimizer.step(); for key in loss: epoch_loss[key] += loss[key]
numeric: every term's running sum links one autograd node per batch for the whole epoch
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
epoch_loss = {"total": 0.0, "semantic_1_1": 0.0, "semantic_1_2": 0.0}
for _ in range(6):
    x = torch.randn(8, 8)
    scores = model(x)
    loss = {"semantic_1_1": F.cross_entropy(scores, x[:, :4].argmax(-1)), "semantic_1_2": 0.1 * scores.pow(2).mean()}
    loss["total"] = loss["semantic_1_1"] + loss["semantic_1_2"]
    optimizer.zero_grad()
    loss["total"].backward()
    optimizer.step()
    for key in loss:
        epoch_loss[key] += loss[key]  # BUG
        # FIX: epoch_loss[key] += loss[key].item()
_gb.done(model, kept=list(epoch_loss.values()))
