"""Swin Transformer's `train_one_epoch` with gradient accumulation: the optimizer steps when `(idx + 1) % ACCUMULATION_STEPS == 0` with `idx` restarting every epoch and `optimizer.zero_grad()` at the start of each epoch, so when an epoch's batch count is not a multiple of the window the last batches' gradients never reach a step.

source: microsoft/Swin-Transformer#185 (https://github.com/microsoft/Swin-Transformer/issues/185), "gradient_accumulation should use "epoch * num_steps + idx" rather than "idx + 1"" (open): "if (idx + 1) % config.TRAIN.ACCUMULATION_STEPS == 0: optimizer.step(); optimizer.zero_grad(); lr_scheduler.step_update(epoch * num_steps + idx)". main.py's train_one_epoch was read (model.train(); optimizer.zero_grad() at its start; the loss divided by ACCUMULATION_STEPS; loss_scaler(..., update_grad=(idx + 1) % ACCUMULATION_STEPS == 0)); the AMP loss scaler is reduced to backward and step, the Swin model to an MLP. The issue's one-line proposal alone would leave the epoch-start zero_grad clearing the tail, so the twin counts windows over the whole run and clears only after a step
family: dropped-window
shape: AdamW(lr=1e-3), ACCUMULATION_STEPS = 4, 2 epochs of 10 batches: each epoch's last 2 batches are cleared at the next epoch's start (or at the end)
numeric: the bug trains on 16 of the 20 batches (4 steps); the twin takes 5 steps over all 20
watch: GG102 GG103
lint: GG103
bug-step: 3
"""
import torch
import torch.nn.functional as F

import _gb

ACCUMULATION_STEPS = 4
_gb.setup()
data_loader = [(torch.randn(6, 12), torch.randint(0, 4, (6,))) for _ in range(10)]
model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.GELU(), torch.nn.Linear(24, 4))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
num_steps = len(data_loader)
# FIX: optimizer.zero_grad()
for epoch in range(2):
    model.train()
    optimizer.zero_grad()  # BUG
    for idx, (samples, targets) in enumerate(data_loader):
        loss = F.cross_entropy(model(samples), targets)
        loss = loss / ACCUMULATION_STEPS
        loss.backward()
        if (idx + 1) % ACCUMULATION_STEPS == 0:  # BUG
        # FIX: if (epoch * num_steps + idx + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
_gb.done(model)
