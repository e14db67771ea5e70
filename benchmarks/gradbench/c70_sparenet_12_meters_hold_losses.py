"""SpareNet runner: the training losses are handed to the average meters as tensors, which keep their graphs.

source: microsoft/SpareNet#12 (https://github.com/microsoft/SpareNet/issues/12), "GPU memory leakage (CUDA out of memory after 2 epochs)": "the actual losses (not the value or a detached version) are accumulating for visualization"; the maintainer: "It makes full sense to me ... We will fix it"
family: graph-logging
shape: runners/sparenet_runner.py: losses = self.completion(data); loss.backward(); optimizer.step(); self.train_losses.update([coarse_loss, refine_loss]) where AverageMeter.update does self._sum += value
numeric: each meter's running sum links every batch's loss graph until it is reset
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class AverageMeter:
    def __init__(self, n):
        self._sum = [0.0] * n
        self._count = 0

    def update(self, values):
        for i, v in enumerate(values):
            self._sum[i] += v
        self._count += 1


_gb.setup()
coarse = torch.nn.Linear(6, 6)
refine = torch.nn.Linear(6, 6)
_gb.start(coarse, refine)
optimizer = torch.optim.Adam(list(coarse.parameters()) + list(refine.parameters()), lr=1e-3)
train_losses = AverageMeter(2)
for _ in range(6):
    partial = torch.randn(8, 6)
    c = coarse(partial)
    r = refine(c)
    coarse_loss = F.mse_loss(c, partial.roll(1, 1))
    refine_loss = F.mse_loss(r, partial.roll(1, 1))
    optimizer.zero_grad()
    (coarse_loss + refine_loss).backward()
    optimizer.step()
    train_losses.update([coarse_loss, refine_loss])  # BUG
    # FIX: train_losses.update([coarse_loss.item(), refine_loss.item()])
_gb.done(coarse, refine, kept=train_losses._sum)
