"""PyTorch Lightning's Metrics API: a metric's accumulated states were updated from the predictions without detaching them, so a metric updated in `training_step` keeps every batch's autograd graph in its states and memory grows over the epoch.

source: Lightning-AI/pytorch-lightning#4313 (https://github.com/Lightning-AI/pytorch-lightning/pull/4313), "[Metrics] Detach bugfix" (bug / fix, Metrics, merged): "Fixes #4098 / Fixes #4266. Make sure that the metrics states gets detached from the computational graph to prevent memory consumption from growing." The metric is a mean-squared-error Metric written out (sum_squared_error and total states, update() and compute()), called on the training predictions; the model is an MLP regressor. The twin detaches the prediction inside update(), which is what detaching the states amounts to
family: graph-logging
shape: SGD(lr=0.01), 8 batches of 32 with 16 features, one metric update per batch
numeric: the metric's state holds every batch's prediction graph at the end
watch: out: the metric holds graph nodes, not gradient; the watch follows .grad
lint: GG201
scope-history: lint declared out when the case was written ("the sum happens inside a metric's method fed the model output, not a loss summed in the loop"); re-declared GG201 before the round's merged code ran on round 13, from the rule's extended definition (a model output handed to a method of an object of the file that keeps it in the object's state), written from earlier rounds' cases
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class MeanSquaredError:
    def __init__(self):
        self.sum_squared_error = torch.tensor(0.0)
        self.total = 0

    def update(self, preds, target):
        self.sum_squared_error = self.sum_squared_error + ((preds - target) ** 2).sum()  # BUG
        # FIX: self.sum_squared_error = self.sum_squared_error + ((preds.detach() - target) ** 2).sum()
        self.total += target.numel()

    def compute(self):
        return self.sum_squared_error / max(self.total, 1)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
train_mse = MeanSquaredError()
for batch_idx in range(8):
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    preds = model(x)
    loss = F.mse_loss(preds, y)
    train_mse.update(preds, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
epoch_mse = train_mse.compute()
_gb.done(model, kept=[train_mse.sum_squared_error])
