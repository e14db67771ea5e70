"""wandb 0.8.1: `wandb.log({"loss": loss})` with the loss tensor itself (not `loss.item()`) kept the logged tensors, and with them their autograd graphs, alive in the run's history, so memory grew every step (tens of GB per hour in the report).

source: wandb/wandb#354 (https://github.com/wandb/wandb/issues/354), "Memory leak using pytorch" (label bug): "when I log pytorch tensor values, I end up with memory leak, and it is quite severe (my code consumes around 40GB of memory in less than an hour just by logging the loss values), but if I log `tensor.item()` memory leak disappears"; a maintainer: "This is fixed in 0.8.2". wandb's history code was not read; the run's history is reduced to a list that keeps what is logged (what the leak amounts to). The twin logs loss.item(), the reporter's workaround
family: graph-logging
shape: Adam(lr=1e-3), 6 steps of a CNN-sized MLP, one wandb.log per step
numeric: the history keeps every step's loss tensor and the autograd nodes behind it
watch: out: the logged tensors hold graph nodes, not gradient; the watch follows .grad
lint: out: what a logging library keeps of its arguments is inside the library
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class Run:
    """The slice of a wandb run that matters here: log() keeps the values it is given."""

    def __init__(self):
        self.history = []

    def log(self, row):
        self.history.append(dict(row))


_gb.setup()
wandb_run = Run()
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(6):
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    wandb_run.log({"loss": loss})  # BUG
    # FIX: wandb_run.log({"loss": loss.item()})
_gb.done(model, kept=[row["loss"] for row in wandb_run.history if torch.is_tensor(row["loss"])])
