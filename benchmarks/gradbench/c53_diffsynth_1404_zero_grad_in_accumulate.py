"""DiffSynth-Studio runner: optimizer.zero_grad() at the start of accelerator.accumulate discards the accumulated micro-batches.

source: modelscope/DiffSynth-Studio#1404 (https://github.com/modelscope/DiffSynth-Studio/pull/1404), moves optimizer.zero_grad() from the beginning of accelerator.accumulate(model) to after optimizer.step() and scheduler.step()
family: misplaced-clear
shape: with accelerator.accumulate(model): optimizer.zero_grad(); loss = model(data); accelerator.backward(loss); optimizer.step(); scheduler.step() with gradient_accumulation_steps > 1 (Accelerate's prepared optimizer clears and steps only on the sync micro-batch)
numeric: each update uses the last micro-batch's gradient (divided by the accumulation steps by Accelerate)
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F
from accelerate import Accelerator

import _gb

_gb.setup()
accelerator = Accelerator(gradient_accumulation_steps=3, cpu=True)
model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 6))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0)
model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
for i in range(9):
    data = torch.randn(4, 6)
    with accelerator.accumulate(model):
        optimizer.zero_grad()  # BUG
        loss = F.mse_loss(model(data), data.flip(-1))
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        # FIX: optimizer.zero_grad()
_gb.done(model)
