"""deepchecks' vision checks: a check cached the batch predictions it was given across the whole run, and when the predictions came from a model called with autograd on, each cached tensor kept that batch's graph, so memory grew with every batch checked.

source: deepchecks/deepchecks#1341 (https://github.com/deepchecks/deepchecks/pull/1341), merged ("good catch" in review): it detaches the tensors an image check keeps between batches (the pull request's description was read, not the check's code). The check is reduced to a class whose update() keeps the predictions and labels of every batch for compute(); the model is an MLP classifier run on the data as a user's prediction formatter does, without torch.no_grad. The twin keeps detached predictions
family: graph-logging
shape: 6 batches of 32 with 16 features, a 3-class MLP; no training, the check only reads predictions
numeric: the cache holds every batch's prediction graph at the end (40 autograd nodes; the twin 0)
watch: out: the cache holds graph nodes, not gradient; no gradient is ever computed here
lint: out: the tensors are kept by a list append inside a check's method, not an arithmetic sum in the loop
bug-step: end
"""
import torch

import _gb


class SegmentPerformanceCheck:
    def __init__(self):
        self._predictions, self._labels = [], []

    def update(self, predictions, labels):
        self._predictions.append(predictions)  # BUG
        # FIX: self._predictions.append(predictions.detach())
        self._labels.append(labels)

    def compute(self):
        preds, labels = torch.cat(self._predictions), torch.cat(self._labels)
        return (preds.argmax(1) == labels).double().mean().item()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
_gb.start(model)
check = SegmentPerformanceCheck()
for batch in range(6):
    images, labels = torch.randn(32, 16), torch.randint(0, 3, (32,))
    predictions = torch.softmax(model(images), dim=1)
    check.update(predictions, labels)
accuracy = check.compute()
_gb.done(model, kept=check._predictions)
