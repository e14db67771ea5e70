"""A pytorch_warmup user's loop: `loss.backward()`, then `optimizer.zero_grad()`, then `optimizer.step()` with the warmup scheduler's dampening, so every step finds cleared gradients and the model never changes; the user reported that the warmup "does not work".

source: Tony-Y/pytorch_warmup#12 (https://github.com/Tony-Y/pytorch_warmup/issues/12), the user's training loop quoted in the issue; the maintainer's diagnosis is that optimizer.zero_grad() sits between loss.backward() and optimizer.step(). The warmup is pytorch_warmup's linear warmup written inline (lr multiplied by min(1, (step + 1) / warmup_period)) with a cosine schedule; the model is an MLP classifier, the optimizer is AdamW. The twin clears before the backward
family: misplaced-clear
shape: AdamW(lr=1e-2, weight_decay 0), warmup_period 3, CosineAnnealingLR(T_max 6), 6 steps of batches of 32
numeric: the bug never updates the model
watch: GG102 GG110
lint: GG102
bug-step: 1
"""
import math

import torch
import torch.nn.functional as F

import _gb

warmup_period = 3
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6)
for step in range(6):
    x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
    # FIX: optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.zero_grad()  # BUG
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] *= min(1.0, (step + 1) / warmup_period)
    optimizer.step()
    for group, lr in zip(optimizer.param_groups, base_lrs):
        group["lr"] = lr
    lr_scheduler.step()
_gb.done(model)
