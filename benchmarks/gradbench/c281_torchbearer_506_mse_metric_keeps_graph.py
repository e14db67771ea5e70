"""torchbearer's mean-squared-error metric: the per-batch value it aggregates is computed from the model's prediction with its autograd graph and is kept by the running aggregate, so every batch's graph stays alive and memory grows over the epoch.

source: pytorchbearer/torchbearer#506 (https://github.com/pytorchbearer/torchbearer/issues/506), "Memory leak in mse metric" (bug), fixed by PR #507; only the titles were read, not the metric code. The metric is reduced to a mean aggregator whose process() adds the batch's squared error to a running sum, what a mean metric over an undetached prediction amounts to; the model is an MLP regressor. The twin computes the metric from the detached prediction
family: graph-logging
shape: SGD(lr=0.01), 6 batches of 32 with 16 features, one metric update per batch
numeric: the running sum holds every batch's prediction graph at the end
watch: out: the metric holds graph nodes, not gradient; the watch follows .grad
lint: GG201
scope-history: lint declared out when the case was written ("the sum happens inside a metric's method fed the model output, not a loss summed in the loop"); re-declared GG201 after the rule was extended, from this family's cases, to a model output handed to an object's method that keeps it in the object's state (in-sample from then on)
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class MeanSquaredError:
    def __init__(self):
        self._sum, self._count = 0.0, 0

    def process(self, y_pred, y_true):
        value = torch.mean((y_pred - y_true) ** 2)
        self._sum = self._sum + value
        self._count += 1
        return value

    def process_final(self):
        return self._sum / max(self._count, 1)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
mse = MeanSquaredError()
for batch in range(6):
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    y_pred = model(x)
    loss = F.smooth_l1_loss(y_pred, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    mse.process(y_pred, y)  # BUG
    # FIX: mse.process(y_pred.detach(), y)
_gb.done(model, kept=[mse._sum] if torch.is_tensor(mse._sum) else [])
