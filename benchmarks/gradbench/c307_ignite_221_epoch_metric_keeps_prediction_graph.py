"""ignite's metrics attached to a training engine: EpochMetric (and the other metrics) stored or accumulated `y_pred` as the engine's output gave it, without detaching, so on a training engine (no torch.no_grad around the update) every iteration's prediction graph stays in the metric until the epoch ends.

source: pytorch/ignite#221 (https://github.com/pytorch/ignite/issues/221), "[Feature Request] Apply `detach` to `y_pred` in metrics" (closed, implemented): "I was trying to add `EpochMetric` and when `y_pred` are cumulated without detaching we update the graph etc.. And actually this is the case"; "this really only applies when calculating metrics in a training engine (where there is no call to `torch.no_grad`)". The engine is written out (a process function that steps the optimizer and returns y_pred and y, then the metric's update on that output); the metric is an EpochMetric that keeps the predictions of the epoch and computes a mean absolute error at its end; the model is an MLP regressor. The twin detaches y_pred in update(), as ignite's metrics do since
family: graph-logging
shape: SGD(lr=0.01), one epoch of 8 iterations of 16 samples
numeric: the metric's lists hold all 8 iterations' prediction graphs at the end of the epoch
watch: out: the metric holds graph nodes, not gradient; the watch follows .grad
lint: GG201
scope-history: lint declared out when the case was written ("the tensors are kept by a list append inside a metric's method, not an arithmetic sum in the loop"); re-declared GG201 before the round's merged code ran on round 13, from the rule's extended definition (a model output handed to a method of an object of the file that keeps it in the object's state), written from earlier rounds' cases
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class EpochMetric:
    def __init__(self, compute_fn):
        self.compute_fn = compute_fn
        self._predictions, self._targets = [], []

    def update(self, output):
        y_pred, y = output
        self._predictions.append(y_pred)  # BUG
        # FIX: self._predictions.append(y_pred.detach())
        self._targets.append(y)

    def compute(self):
        return self.compute_fn(torch.cat(self._predictions), torch.cat(self._targets))


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def process_function(batch):
    x, y = batch
    optimizer.zero_grad()
    y_pred = model(x)
    loss = F.mse_loss(y_pred, y)
    loss.backward()
    optimizer.step()
    return y_pred, y


mae = EpochMetric(lambda p, t: (p - t).abs().mean())
for iteration in range(8):
    output = process_function((torch.randn(16, 12), torch.randn(16, 1)))
    mae.update(output)
_gb.done(model, kept=mae._predictions)
epoch_mae = mae.compute()
