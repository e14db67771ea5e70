"""nflows BatchNorm transform: the running mean and variance are updated in place from tensors that still carry the graph.

source: bayesiains/nflows#11 (https://github.com/bayesiains/nflows/pull/11), "Fix memory leak in batch norm" (merged; issue bayesiains/nflows#10): "The fix is simply to detach the graph prior to computing the running meaning and variance for batch norm"; maintainer: "Yep, this is indeed a bug. We shouldn't be adding running mean/variance computation to the graph"
family: graph-in-buffer
shape: nflows/transforms/normalization.py BatchNorm.forward(inputs): if self.training: mean, var = inputs.mean(0), inputs.var(0); self.running_mean.mul_(1 - self.momentum).add_(mean * self.momentum); self.running_var.mul_(1 - self.momentum).add_(var * self.momentum); outputs = self.weight * (inputs - mean) / torch.sqrt(var + self.eps) + self.bias. Used between the layers of a flow (batch_norm_between_layers=True) trained on -log_prob
numeric: each running statistic reaches every training step's batch statistics through the in-place updates: the graph (and RAM, "of order GB" per the issue) grows every step
watch: GG202
lint: GG202
bug-step: end
"""
import math

import torch

import _gb


class BatchNorm(torch.nn.Module):
    def __init__(self, features, eps=1e-5, momentum=0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = torch.nn.Parameter(torch.ones(features))
        self.bias = torch.nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.zeros(features))

    def forward(self, inputs):
        if self.training:
            mean, var = inputs.mean(0), inputs.var(0)
            self.running_mean.mul_(1 - self.momentum).add_(mean * self.momentum)  # BUG
            self.running_var.mul_(1 - self.momentum).add_(var * self.momentum)  # BUG
            # FIX: self.running_mean.mul_(1 - self.momentum).add_(mean.detach() * self.momentum)
            # FIX: self.running_var.mul_(1 - self.momentum).add_(var.detach() * self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        outputs = self.weight * (inputs - mean) / torch.sqrt(var + self.eps) + self.bias
        logabsdet = torch.sum(torch.log(self.weight.abs()) - 0.5 * torch.log(var + self.eps))
        return outputs, logabsdet * inputs.new_ones(inputs.shape[0])


class Flow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2), BatchNorm(2), torch.nn.Linear(2, 2), BatchNorm(2)])

    def log_prob(self, x):
        total = x.new_zeros(x.shape[0])
        for layer in self.layers:
            if isinstance(layer, BatchNorm):
                x, logabsdet = layer(x)
            else:
                x, logabsdet = layer(x), torch.slogdet(layer.weight)[1] * x.new_ones(x.shape[0])
            total = total + logabsdet
        return total - 0.5 * (x ** 2).sum(dim=1) - math.log(2 * math.pi)


_gb.setup()
flow = Flow()
_gb.start(flow)
optimizer = torch.optim.Adam(flow.parameters(), lr=1e-3)
for i in range(10):
    x = torch.randn(64, 2) * torch.tensor([1.0, 0.3]) + 0.5
    optimizer.zero_grad()
    loss = -flow.log_prob(x).mean()
    loss.backward()
    optimizer.step()
_gb.done(flow, kept=[m.running_mean for m in flow.layers if isinstance(m, BatchNorm)])
