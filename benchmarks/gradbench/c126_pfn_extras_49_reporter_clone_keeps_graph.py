"""pytorch-pfn-extras reporting: the summary of a reported tensor kept `value.clone()`, which keeps the autograd graph, in its running sums, so every reported loss of the logging period stays alive through them.

source: pfnet/pytorch-pfn-extras#49 (https://github.com/pfnet/pytorch-pfn-extras/pull/49), "Use detach instead of clone to avoid retention of computational graph in reporter" (merged): "This fixes a memory leak that happens due to the reporter retaining the computational graph associated with the reported Tensor." The pre-fix file was not read: the summary is written after Chainer's Summary, from which ppe's reporting module derives (running sums x += w * v, x2 += w * v * v, n += w), with the clone the PR replaces. The training loop reports the live loss each iteration, as ppe.reporting.report({'train/loss': loss}) in the examples; the summary is reset once per epoch (LogReport's period). The twin detaches instead of cloning
family: graph-logging
shape: class Summary: def add(self, value, weight=1): if torch.is_tensor(value): value = value.clone(); self._x += weight * value; self._x2 += weight * value * value; self._n += weight. for epoch: summary = DictSummary(); for x, t in loader: optimizer.zero_grad(); loss = F.cross_entropy(model(x), t); loss.backward(); optimizer.step(); summary.add({'train/loss': loss}). SGD, 8 iterations per epoch, 2 epochs
numeric: the running sums reach the graph of every iteration of the epoch
watch: out: the summary holds graph nodes, not gradient; the watch follows .grad
lint: out: the loss is kept inside a reporting library's summary (a clone and a running sum behind a call), not by a sum in the loop
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class Summary:
    def __init__(self):
        self._x, self._x2, self._n = 0.0, 0.0, 0

    def add(self, value, weight=1):
        if torch.is_tensor(value):
            value = value.clone()  # BUG
            # FIX: value = value.detach()
        self._x += weight * value
        self._x2 += weight * value * value
        self._n += weight

    def compute_mean(self):
        return self._x / self._n


class DictSummary:
    def __init__(self):
        self._summaries = {}

    def add(self, d):
        for k, v in d.items():
            self._summaries.setdefault(k, Summary()).add(v)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loader = [(x, x[:, :3].argmax(1)) for x in (torch.randn(8, 10) for _ in range(8))]
for epoch in range(2):
    summary = DictSummary()
    for x, t in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), t)
        loss.backward()
        optimizer.step()
        summary.add({"train/loss": loss})
_gb.done(model, kept=[s._x for s in summary._summaries.values()])
