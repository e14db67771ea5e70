"""Continuous-Recurrent-Units training loop: the epoch statistics are summed from the loss tensors themselves (`epoch_ll += loss`, not `loss.item()`), so every batch's computation graph stays alive until the epoch's averages are dropped.

source: boschresearch/Continuous-Recurrent-Units#4 (https://github.com/boschresearch/Continuous-Recurrent-Units/pull/4), "Avoid high memory usage from past computations": "Computation graph of losses are held in memory because of not using .item(). This eventually leads to high memory usage and hanging the system. By releasing the computation graph after saving the required values, high memory usage is mitigated." The PR is closed without a merge on record. The code was not read: the loop follows the PR's description (the per-batch loss and an error metric summed as tensors into epoch totals, averaged and returned by the epoch function); the CRU cell is reduced to a GRU with a Gaussian output head (negative log-likelihood loss). The twin sums .item() values, as the PR does
family: graph-logging
shape: def train_epoch(): epoch_ll = 0; epoch_rmse = 0; for obs, target in loader: mean, var = model(obs); loss = gaussian nll; optimizer.zero_grad(); loss.backward(); optimizer.step(); epoch_ll += loss; epoch_rmse += mse(mean, target); return epoch_ll / n, (epoch_rmse / n).sqrt(). Adam(lr=1e-3), 2 epochs of 6 batches
numeric: the returned epoch statistics reach the graphs of every batch of the epoch
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn as nn

import _gb


class CRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRU(3, 8, batch_first=True)
        self.mean = nn.Linear(8, 2)
        self.logvar = nn.Linear(8, 2)

    def forward(self, obs):
        h, _ = self.cell(obs)
        return self.mean(h), self.logvar(h).exp()


def train_epoch(model, loader, optimizer):
    epoch_ll = 0
    epoch_rmse = 0
    for obs, target in loader:
        mean, var = model(obs)
        loss = nn.functional.gaussian_nll_loss(mean, target, var)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        epoch_ll += loss  # BUG
        epoch_rmse += ((mean - target) ** 2).mean()  # BUG
        # FIX: epoch_ll += loss.item()
        # FIX: epoch_rmse += ((mean - target) ** 2).mean().item()
    return epoch_ll / len(loader), (epoch_rmse / len(loader)) ** 0.5


_gb.setup()
model = CRU()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loader = [(torch.randn(4, 10, 3), torch.randn(4, 10, 2)) for _ in range(6)]
for epoch in range(2):
    train_ll, train_rmse = train_epoch(model, loader, optimizer)
_gb.done(model, kept=[train_ll, train_rmse])
