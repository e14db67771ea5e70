"""Accumulation loop whose epoch tail is never stepped and leaks into the next epoch.

source: WalkingMeatAxolotl/AnimaLoraStudio#305 (https://github.com/WalkingMeatAxolotl/AnimaLoraStudio/pull/305), "fix(train): grad_accum tail group not full also steps + normalise by the actual batch count"
family: dropped-window
shape: loop.py steps only when (batch_idx + 1) % grad_accum == 0, with no flush at the epoch boundary and no zero_grad there either
numeric: each epoch's len % grad_accum tail batches are added to the next epoch's first window, which then applies grad_accum + tail micro-batches each divided by grad_accum; the last epoch's tail is dropped
watch: GG103
lint: GG103
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
_gb.start(model)
grad_accum = 4
dataset = [(torch.randn(2, 8), torch.randn(2, 8)) for _ in range(7)]
for epoch in range(2):
    for batch_idx, (latents, noise) in enumerate(dataset):
        # FIX: group_size = min(grad_accum, len(dataset) - batch_idx // grad_accum * grad_accum)
        loss = F.mse_loss(model(latents), noise)
        loss = loss / grad_accum  # BUG
        # FIX: loss = loss / group_size
        loss.backward()
        if (batch_idx + 1) % grad_accum == 0:  # BUG
        # FIX: if (batch_idx + 1) % grad_accum == 0 or batch_idx + 1 == len(dataset):
            optimizer.step()
            optimizer.zero_grad()
_gb.done(model)
