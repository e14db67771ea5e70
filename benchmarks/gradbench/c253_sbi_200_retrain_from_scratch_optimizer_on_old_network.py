"""sbi's `retrain_from_scratch`: a later round rebuilds the neural density estimator but keeps the optimizer, which still points to the old network, so the new network receives gradients that no optimizer applies and is not trained at all.

source: sbi-dev/sbi#200 (https://github.com/sbi-dev/sbi/issues/200), "retrain_from_scratch bug" (label bug, closed): "when `retrain_from_scratch=True`, we need to reset the optimizer, otherwise it points to the wrong nn and won't train anything." sbi's inference code was not read; the density estimator is reduced to a Gaussian MLP fitted by negative log-likelihood, and the rounds to two rounds of 3 steps. The twin builds a new optimizer on the rebuilt network, the issue's fix
family: wrong-optimizer
shape: Adam(lr=1e-2); round 1 trains the first network for 3 steps; round 2 rebuilds the network and trains 3 more steps
numeric: the rebuilt network keeps its initial values in the bug
watch: GG106 GG110
lint: out: rebinding a name to a new network after the optimizer was built is ordinary Python; which network an optimizer should hold is the program's intent
bug-step: 4
"""
import torch

import _gb


def build():
    return torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def nll(net, theta, x):
    mean, log_std = net(x).chunk(2, dim=1)
    return (log_std + 0.5 * ((theta - mean) / log_std.exp()) ** 2).sum(1).mean()


def train(net, optimizer, steps):
    for _ in range(steps):
        theta = torch.randn(32, 2)
        x = torch.cat([theta + 0.1 * torch.randn(32, 2), torch.randn(32, 1)], 1)
        optimizer.zero_grad()
        nll(net, theta, x).backward()
        optimizer.step()


_gb.setup()
net = build()
optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
train(net, optimizer, 3)
# round 2 with retrain_from_scratch=True
net = build()
# FIX: optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
_gb.start(net)
train(net, optimizer, 3)
_gb.done(net)
