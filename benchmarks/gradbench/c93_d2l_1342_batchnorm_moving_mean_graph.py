"""Dive into Deep Learning, batch normalisation from scratch: batch_norm returns moving_mean and moving_var still attached to the graph.

source: d2l-ai/d2l-en#1342 (https://github.com/d2l-ai/d2l-en/pull/1342), "[PyTorch] fix(Batch Normalization): memory leaky" (merged): "X is associated with *moving_mean* and *moving_var* via gradient computation. As the result, **X will not be freed** ... the returning values here should be modified to *moving_mean.data* and *moving_var.data*"
family: graph-in-buffer
shape: def batch_norm(X, gamma, beta, moving_mean, moving_var, eps, momentum): if not torch.is_grad_enabled(): X_hat = (X - moving_mean) / torch.sqrt(moving_var + eps); else: mean = X.mean(dim=0); var = ((X - mean) ** 2).mean(dim=0); X_hat = (X - mean) / torch.sqrt(var + eps); moving_mean = momentum * moving_mean + (1.0 - momentum) * mean; moving_var = momentum * moving_var + (1.0 - momentum) * var; Y = gamma * X_hat + beta; return Y, moving_mean, moving_var. class BatchNorm(nn.Module).forward: Y, self.moving_mean, self.moving_var = batch_norm(X, self.gamma, self.beta, self.moving_mean, self.moving_var, eps=1e-5, momentum=0.9)
numeric: the moving statistics reach every batch's X and statistics of the run ("The memory would not be freed and accumulate every epochs to explode finally")
watch: GG202
lint: GG202
bug-step: end
"""
import torch
from torch import nn

import _gb


def batch_norm(X, gamma, beta, moving_mean, moving_var, eps, momentum):
    if not torch.is_grad_enabled():
        X_hat = (X - moving_mean) / torch.sqrt(moving_var + eps)
    else:
        mean = X.mean(dim=0)
        var = ((X - mean) ** 2).mean(dim=0)
        X_hat = (X - mean) / torch.sqrt(var + eps)
        moving_mean = momentum * moving_mean + (1.0 - momentum) * mean
        moving_var = momentum * moving_var + (1.0 - momentum) * var
    Y = gamma * X_hat + beta
    return Y, moving_mean, moving_var  # BUG
    # FIX: return Y, moving_mean.data, moving_var.data


class BatchNorm(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(num_features))
        self.beta = nn.Parameter(torch.zeros(num_features))
        self.moving_mean = torch.zeros(num_features)
        self.moving_var = torch.ones(num_features)

    def forward(self, X):
        Y, self.moving_mean, self.moving_var = batch_norm(
            X, self.gamma, self.beta, self.moving_mean, self.moving_var, eps=1e-5, momentum=0.9)
        return Y


_gb.setup()
net = nn.Sequential(nn.Linear(10, 16), BatchNorm(16), nn.Sigmoid(), nn.Linear(16, 3))
_gb.start(net)
optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(2):
    for i in range(6):
        X = torch.randn(16, 10)
        y = X[:, :3].argmax(dim=1)
        optimizer.zero_grad()
        loss_fn(net(X), y).backward()
        optimizer.step()
_gb.done(net, kept=[net[1].moving_mean, net[1].moving_var])
