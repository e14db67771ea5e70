"""PET: the accumulation counter resets every epoch, so a small dataset never reaches a step.

source: timoschick/pet#25 (https://github.com/timoschick/pet/pull/25), "Fix gradient accumulation with small dataset sizes": "`step` is reset across epochs ... You'll never reach step = 4, and then never do gradient updates"
family: dropped-window
shape: for epoch: for step, batch in enumerate(loader): loss.backward(); if (step + 1) % gradient_accumulation_steps == 0: optimizer.step(); zero_grad(); with 3 batches per epoch and 4 accumulation steps
numeric: no optimizer step ever runs: the model stays at its initialisation while .grad grows across epochs
watch: GG103
lint: GG103
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Linear(10, 2)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
_gb.start(model)
gradient_accumulation_steps = 4
train_data = [(torch.randn(8, 10), torch.randint(0, 2, (8,))) for _ in range(3)]
global_step = 0
# FIX: step = 0
for epoch in range(4):
    for step, (x, y) in enumerate(train_data):  # BUG
    # FIX: for x, y in train_data:
        loss = F.cross_entropy(model(x), y) / gradient_accumulation_steps
        loss.backward()
        # FIX: step += 1
        if (step + 1) % gradient_accumulation_steps == 0:  # BUG
        # FIX: if step % gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            global_step += 1
_gb.done(model)
