"""YOLO trainer: per-component losses summed into a dict of device tensors.

source: MultimediaTechLab/YOLO#83 (https://github.com/MultimediaTechLab/YOLO/pull/83), "[FIX] Fixes memory leak": "Around 1-2MB of CPU memory are being leaked per batch"; the fix keeps total_loss[loss_name] += loss_val.item() * batch_size
family: graph-logging
shape: total_loss = defaultdict(lambda: torch.tensor(0.0)); for each batch: loss, loss_item = loss_fn(...); backward; step; for loss_name, loss_val in loss_item.items(): total_loss[loss_name] += loss_val * batch_size
numeric: each loss component keeps its autograd node chain (one link per batch) for the whole epoch
watch: out: no gradient is wrong; the run-time watch checks .grad buffers, not logging tensors
lint: GG201
bug-step: end
"""
from collections import defaultdict

import torch

import _gb


def loss_fn(pred, target):
    box = (pred[:, :4] - target[:, :4]).abs().mean()
    cls = torch.nn.functional.binary_cross_entropy_with_logits(pred[:, 4:], target[:, 4:])
    return box + cls, {"BoxLoss": box, "BCELoss": cls}


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
_gb.start(model)
total_loss = defaultdict(lambda: torch.tensor(0.0))
for batch in range(30):
    images, targets = torch.randn(4, 10), torch.rand(4, 8)
    optimizer.zero_grad()
    loss, loss_item = loss_fn(model(images), targets)
    loss.backward()
    optimizer.step()
    for loss_name, loss_val in loss_item.items():
        total_loss[loss_name] += loss_val * images.shape[0]  # BUG
        # FIX: total_loss[loss_name] += loss_val.item() * images.shape[0]
_gb.done(model, kept=list(total_loss.values()))
