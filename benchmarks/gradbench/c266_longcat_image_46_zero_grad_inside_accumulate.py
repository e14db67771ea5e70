"""LongCat-Image's training examples with Accelerate: `optimizer.zero_grad()` is called at the start of the `accelerator.accumulate(model)` block; Accelerate's wrapped optimizer only clears on the micro-batch where gradients sync, so it wipes the gradients accumulated by the window's earlier micro-batches just before the last backward, and each update uses the last micro-batch alone.

source: meituan-longcat/LongCat-Image#46 (https://github.com/meituan-longcat/LongCat-Image/issues/46), "[BUG] Gradient accumulation logic in train_examples/ might be incorrect?" (closed): "`with accelerator.accumulate(model): optimizer.zero_grad()  # <--- Clears gradients at the start of the step ... optimizer.step()` When accelerator syncs gradients (on the final accumulation step), calling zero_grad() at the beginning of the block will wipe out all the gradients accumulated from previous micro-batches. This effectively disables gradient accumulation, as the optimizer step will only see the gradients from the very last micro-batch. Recommendation: Move `optimizer.zero_grad()` to after `optimizer.step()`." train_examples/ was not read beyond the issue; the image model is reduced to an MLP regressor, run with the real Accelerate (CPU, gradient_accumulation_steps=4). The twin clears after the step, the issue's recommendation (its second point, that the loss is not scaled manually, is left out: accelerator.backward divides by the accumulation count)
family: misplaced-clear
shape: AdamW(lr=1e-3) prepared by Accelerate, gradient_accumulation_steps = 4, 8 micro-batches of 8
numeric: each step applies 1/4 of the last micro-batch's gradient instead of the window's mean
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F
from accelerate import Accelerator

import _gb

_gb.setup()
accelerator = Accelerator(gradient_accumulation_steps=4, cpu=True)
batches = [(torch.randn(8, 10), torch.randn(8, 2)) for _ in range(8)]
model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.GELU(), torch.nn.Linear(32, 2))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer = accelerator.prepare(model, optimizer)
for x, target in batches:
    with accelerator.accumulate(model):
        optimizer.zero_grad()  # BUG
        loss = F.mse_loss(model(x), target)
        accelerator.backward(loss)
        optimizer.step()
        # FIX: optimizer.zero_grad()
_gb.done(accelerator.unwrap_model(model))
