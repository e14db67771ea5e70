"""PET: updates only at (step + 1) % gradient_accumulation_steps == 0, so the batches after the last full window are lost.

source: timoschick/pet#36 (https://github.com/timoschick/pet/issues/36), "Missing optimizer step": "If max_steps or data length is not divisible by gradient_accumulation_steps some gradients are lost" (acknowledged by the author, who asked for a fix)
family: dropped-window
shape: for step, batch in enumerate(train_dataloader): loss = ... / gradient_accumulation_steps; loss.backward(); if (step + 1) % gradient_accumulation_steps == 0: optimizer.step(); scheduler.step(); model.zero_grad()
numeric: with 10 batches and gradient_accumulation_steps = 4 the last 2 batches never reach an update
watch: GG103
lint: GG103
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 2))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.5, total_iters=4)
gradient_accumulation_steps = 4
train_dataloader = [(torch.randn(4, 6), torch.randint(0, 2, (4,))) for _ in range(10)]
for step, (x, labels) in enumerate(train_dataloader):
    loss = F.cross_entropy(model(x), labels)
    loss = loss / gradient_accumulation_steps  # BUG
    # FIX: loss = loss / min(gradient_accumulation_steps, len(train_dataloader) - step // gradient_accumulation_steps * gradient_accumulation_steps)
    loss.backward()
    if (step + 1) % gradient_accumulation_steps == 0:  # BUG
    # FIX: if (step + 1) % gradient_accumulation_steps == 0 or step + 1 == len(train_dataloader):
        optimizer.step()
        scheduler.step()
        model.zero_grad()
_gb.done(model)
