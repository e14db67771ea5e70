"""pytorch-golden-template's training step: the metrics are updated from the model output outside `torch.no_grad()` and the tracker keeps the values, so each batch's graph stays referenced and GPU memory leaks over the epoch.

source: amjltc295/pytorch-golden-template#64 (https://github.com/amjltc295/pytorch-golden-template/pull/64), merged: it wraps the metric update of the trainer in `torch.no_grad()` to fix a GPU memory leak (the pull request's description was read, not the trainer's or the metric classes' code). The tracker is reduced to a dict of lists the trainer appends each batch's metric value to; the metric is a mean absolute error, the model an MLP regressor. The twin computes the metric under torch.no_grad()
family: graph-logging
shape: Adam(lr=1e-3), 6 batches of 32 with 16 features, one metric update per batch
numeric: the tracker holds every batch's output graph at the end
watch: out: the tracker holds graph nodes, not gradient; the watch follows .grad
lint: GG201
scope-history: lint declared out when the case was written ("the value is kept by a list append inside a tracker's method, not an arithmetic sum in the loop"); re-declared GG201 after the rule was extended, from this family's cases, to a model output handed to an object's method that keeps it in the object's state (in-sample from then on)
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class MetricTracker:
    def __init__(self, *keys):
        self._data = {k: [] for k in keys}

    def update(self, key, value):
        self._data[key].append(value)


def mae(output, target):
    return (output - target).abs().mean()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
tracker = MetricTracker("mae")
for batch_idx in range(6):
    data, target = torch.randn(32, 16), torch.randn(32, 1)
    output = model(data)
    loss = F.mse_loss(output, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    tracker.update("mae", mae(output, target))  # BUG
    # FIX: with torch.no_grad():
    # FIX:     tracker.update("mae", mae(output, target))
_gb.done(model, kept=tracker._data["mae"])
