"""PyTorch-YOLOv3 train.py: the accumulation condition `if batches_done % opt.gradient_accumulations:` is inverted, so the optimizer steps on every batch except every N-th, on windows of one or two undivided losses instead of N.

source: eriklindernoren/PyTorch-YOLOv3#325 (https://github.com/eriklindernoren/PyTorch-YOLOv3/issues/325), "Gradient accumulations not working as expected", quoting train.py: loss, outputs = model(imgs, targets); loss.backward(); if batches_done % opt.gradient_accumulations: # Accumulates gradient before each step; optimizer.step(); optimizer.zero_grad() — "When I set gradient_accumulations to be N, I expect that the optimizer will only be called once every N batches, instead this piece of code calls the optimizer every batch except the Nth ... SOLUTION: Just reverse the if condition"; a commenter: "it only works fine for opt.gradient_accumulations = 2" (closed). The Darknet model and YOLO loss are reduced to an MLP with a summed regression loss. The twin steps when (batches_done + 1) % N == 0 (the issue's reversed condition counted from 1, so that the first window also has N batches) and divides each loss by N, which the script never did
family: step-on-wrong-micro-batches
shape: for epoch in range(opt.epochs): model.train(); for batch_i, (_, imgs, targets) in enumerate(dataloader): batches_done = len(dataloader) * epoch + batch_i; loss, outputs = model(imgs, targets); loss.backward(); if batches_done % opt.gradient_accumulations: optimizer.step(); optimizer.zero_grad(). gradient_accumulations = 4, 8 batches per epoch, 2 epochs, Adam
numeric: steps on windows of 2, 1, 1, 2, 1, 1, ... undivided batch losses instead of the mean of 4 (and 6 steps per 8 batches instead of 2)
watch: GG104
lint: GG104
bug-step: 1
"""
import argparse

import torch

import _gb


class Darknet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = torch.nn.Sequential(torch.nn.Linear(10, 24), torch.nn.LeakyReLU(0.1), torch.nn.Linear(24, 5))

    def forward(self, imgs, targets):
        outputs = self.seq(imgs)
        return ((outputs - targets) ** 2).sum(1).mean(), outputs


_gb.setup()
model = Darknet()
_gb.start(model)
opt = argparse.Namespace(epochs=2, gradient_accumulations=4)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
dataloader = [(None, x, torch.tanh(x[:, :5])) for x in (torch.randn(8, 10) for _ in range(8))]
for epoch in range(opt.epochs):
    model.train()
    for batch_i, (_, imgs, targets) in enumerate(dataloader):
        batches_done = len(dataloader) * epoch + batch_i
        loss, outputs = model(imgs, targets)
        loss.backward()  # BUG
        # FIX: (loss / opt.gradient_accumulations).backward()
        if batches_done % opt.gradient_accumulations:  # BUG
        # FIX: if (batches_done + 1) % opt.gradient_accumulations == 0:
            # Accumulates gradient before each step
            optimizer.step()
            optimizer.zero_grad()
_gb.done(model)
