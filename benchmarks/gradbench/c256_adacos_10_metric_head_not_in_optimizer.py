"""pytorch-adacos's MNIST training: the AdaCos metric head (`metric_fc`, whose weight `W` holds the class centres) is never given to an optimizer, so the centres receive gradients but keep their random initial values while only the backbone trains.

source: 4uiiurz1/pytorch-adacos#10 (https://github.com/4uiiurz1/pytorch-adacos/issues/10), "No optimizer for metric_fc?" (open): "the centers (`self.W`) in losses should be updated during training. To do that, it requires using optimizers on both the model and the `metric_fc` ... I did not find any optimizer set on `metric_fc` in your code so technically the centers won't be updated anyway..."; a reply: "Very good catch :) Then only backbone is learned and in classification layer just random weight stay for all training." mnist_train.py was not read; the CNN backbone is reduced to an MLP and AdaCos to its fixed-scale form (scale sqrt(2) log(C - 1), no margin). The twin gives both the model's and metric_fc's parameters to the optimizer
family: orphan
shape: SGD(lr=0.1, momentum=0.9), an MLP backbone to 8 features, AdaCos over 5 classes, 4 steps
numeric: the class centres W keep their initial values in the bug
watch: GG106
lint: out: which modules feed the loss is known only when the model runs
bug-step: 1
"""
import math

import torch
import torch.nn.functional as F

import _gb


class AdaCos(torch.nn.Module):
    def __init__(self, num_features, num_classes):
        super().__init__()
        self.s = math.sqrt(2) * math.log(num_classes - 1)
        self.W = torch.nn.Parameter(torch.empty(num_classes, num_features))
        torch.nn.init.xavier_uniform_(self.W)

    def forward(self, x):
        return self.s * F.normalize(x) @ F.normalize(self.W).t()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
metric_fc = AdaCos(8, 5)
_gb.start(model, metric_fc)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # BUG
# FIX: optimizer = torch.optim.SGD(list(model.parameters()) + list(metric_fc.parameters()), lr=0.1, momentum=0.9)
for step in range(4):
    x, y = torch.randn(16, 16), torch.randint(0, 5, (16,))
    optimizer.zero_grad()
    loss = F.cross_entropy(metric_fc(model(x)), y)
    loss.backward()
    optimizer.step()
_gb.done(model, metric_fc)
