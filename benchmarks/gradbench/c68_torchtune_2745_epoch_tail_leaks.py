"""torchtune recipes: the last micro-batches of an epoch are accumulated, never stepped, and leak into the next epoch's first window.

source: meta-pytorch/torchtune#2745 (https://github.com/meta-pytorch/torchtune/pull/2745), "Fixing counting number of batches for accumulation through epoch": with 63 batches and gradient accumulation 8 "you process the last 7 batches ... continuing accumulating stats and grads for the first 8 batches and then do a step. You end up accumulating 15 batches instead of 8" (open PR; the mechanism is checked by running it here)
family: leaked-window
shape: for epoch: for idx, batch in enumerate(self._dataloader): loss = loss_fn(...) / gradient_accumulation_steps; loss.backward(); if (idx + 1) % self._gradient_accumulation_steps == 0: optimizer.step(); optimizer.zero_grad()
numeric: the first step of epoch 2 applies 15 micro-batches each divided by 8 (its gradient 15/8 of a mean), the tail of the last epoch is never applied
watch: out: no rule covers a window of more than K passes each divided by K (the tail's passes are the loop's own, so not GG114); GG103 covers only the last epoch's tail
lint: out: the window test is the standard one; the leak needs the epoch structure and the loader length
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 6))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
gradient_accumulation_steps = 4
dataloader = [torch.randn(4, 6) for _ in range(7)]
for epoch in range(2):
    for idx, batch in enumerate(dataloader):
        loss = F.mse_loss(model(batch), batch.flip(-1)) / gradient_accumulation_steps  # BUG
        # FIX: loss = F.mse_loss(model(batch), batch.flip(-1)) / (gradient_accumulation_steps if idx < len(dataloader) - len(dataloader) % gradient_accumulation_steps else len(dataloader) % gradient_accumulation_steps)
        loss.backward()
        if (idx + 1) % gradient_accumulation_steps == 0:  # BUG
        # FIX: if (idx + 1) % gradient_accumulation_steps == 0 or idx + 1 == len(dataloader):
            optimizer.step()
            optimizer.zero_grad()
_gb.done(model)
