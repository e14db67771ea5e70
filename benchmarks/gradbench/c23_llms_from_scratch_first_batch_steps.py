"""Gradient accumulation that steps on the first batch and never on the last.

source: rasbt/LLMs-from-scratch#300 (https://github.com/rasbt/LLMs-from-scratch/pull/300), "Improve gradient accumulation": "it is not triggered for the first batch but it is triggered for the last batch" (fixes #299)
family: dropped-window
shape: if batch_idx % accumulation_steps == 0: optimizer.step(); optimizer.zero_grad() -- true at batch 0, so the first window has one micro-batch and the last partial window is left in .grad
numeric: the first update applies one micro-batch divided by accumulation_steps (1/4 of its size); the final micro-batches are never applied
watch: GG111 GG103
lint: GG103
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
_gb.start(model)
accumulation_steps = 4
batches = [(torch.randn(4, 6), torch.randint(0, 2, (4,))) for _ in range(8)]
for batch_idx, (input_batch, target_batch) in enumerate(batches):
    loss = F.cross_entropy(model(input_batch), target_batch) / accumulation_steps
    loss.backward()
    if batch_idx % accumulation_steps == 0:  # BUG
    # FIX: if (batch_idx + 1) % accumulation_steps == 0 or batch_idx + 1 == len(batches):
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
