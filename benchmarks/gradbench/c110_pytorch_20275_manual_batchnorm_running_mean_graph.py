"""A manual BatchNorm2d (ptrblck's batch_norm_manual.py) updates running_mean and running_var from the batch statistics without torch.no_grad(), so the buffers carry an autograd graph that grows every training step.

source: pytorch/pytorch#20275 (https://github.com/pytorch/pytorch/issues/20275), "Memory (CPU/sys) leak with custom batch norm layer"; SsnL: "Yeah, that running_mean update is exactly your problem. You keep extending the graph."; ptrblck: "We've had this issue already in the discussion board, but apparently I've forgotten to fix it in the repo." Code read: ptrblck/pytorch_misc batch_norm_manual.py, whose fixed MyBatchNorm2d.forward computes mean = input.mean([0, 2, 3]); var = input.var([0, 2, 3], unbiased=False) and updates self.running_mean and self.running_var inside `with torch.no_grad():`; the bug is the same update without it
family: graph-in-buffer
shape: class MyBatchNorm2d(nn.BatchNorm2d): forward: if self.training: mean = input.mean([0, 2, 3]); var = input.var([0, 2, 3], unbiased=False); n = input.numel() / input.size(1); self.running_mean = exponential_average_factor * mean + (1 - exponential_average_factor) * self.running_mean; self.running_var = exponential_average_factor * var * n / (n - 1) + (1 - exponential_average_factor) * self.running_var; input = (input - mean) / sqrt(var + eps) * weight + bias. Used in a small conv net trained with SGD
numeric: the running statistics reach the graph of every training step so far (the issue's process grew to the machine's 64 GB)
watch: GG202
lint: GG202
bug-step: end
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import _gb


class MyBatchNorm2d(nn.BatchNorm2d):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super(MyBatchNorm2d, self).__init__(num_features, eps, momentum, affine, track_running_stats)

    def _update(self, mean, var, n, exponential_average_factor):
        self.running_mean = exponential_average_factor * mean + (1 - exponential_average_factor) * self.running_mean
        self.running_var = (exponential_average_factor * var * n / (n - 1)
                            + (1 - exponential_average_factor) * self.running_var)

    def forward(self, input):
        self._check_input_dim(input)
        exponential_average_factor = 0.0
        if self.training and self.track_running_stats:
            if self.num_batches_tracked is not None:
                self.num_batches_tracked += 1
                if self.momentum is None:
                    exponential_average_factor = 1.0 / float(self.num_batches_tracked)
                else:
                    exponential_average_factor = self.momentum
        if self.training:
            mean = input.mean([0, 2, 3])
            var = input.var([0, 2, 3], unbiased=False)
            n = input.numel() / input.size(1)
            self._update(mean, var, n, exponential_average_factor)  # BUG
            # FIX: with torch.no_grad():
            # FIX:     self._update(mean, var, n, exponential_average_factor)
        else:
            mean = self.running_mean
            var = self.running_var
        input = (input - mean[None, :, None, None]) / (torch.sqrt(var[None, :, None, None] + self.eps))
        if self.affine:
            input = input * self.weight[None, :, None, None] + self.bias[None, :, None, None]
        return input


_gb.setup()
model = nn.Sequential(nn.Conv2d(3, 4, 3), MyBatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for _ in range(10):
    x = torch.randn(6, 3, 8, 8)
    y = (x.mean((1, 2, 3)) > 0).long()
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
_gb.done(model, kept=[model[1].running_mean, model[1].running_var])
