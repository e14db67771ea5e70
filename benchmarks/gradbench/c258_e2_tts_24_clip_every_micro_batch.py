"""e2-tts-pytorch's trainer with gradient accumulation: `accelerator.clip_grad_norm_` runs after every backward pass instead of only on the micro-batch where gradients are synced, so each window's gradient is clipped part-way through the accumulation and the later micro-batches are added to an already clipped sum.

source: lucidrains/e2-tts-pytorch#24 (https://github.com/lucidrains/e2-tts-pytorch/pull/24), "fix gradient accumulation" (merged): "1. correctly pass in grad_accumulation_steps value to trainer 2. fix sync issue, otherwise _unscale_gradient halfway if mixed precision used". trainer.py was not read; the fix is taken to guard the clip with `accelerator.sync_gradients` (the standard Accelerate pattern the PR title and its companion #23 describe); Accelerate's accumulate/backward are reduced to a division by the accumulation count and a step every 4 micro-batches (no mixed precision on CPU), the E2-TTS transformer to an MLP regressor
family: clip-in-accumulation
shape: AdamW(lr=1e-3), grad_accumulation_steps = 4, max_grad_norm 0.5, 8 micro-batches of 8
numeric: each step applies clip(clip(clip(g1) + g2) + g3) + g4 instead of clip(g1 + g2 + g3 + g4)
watch: GG115
lint: GG115
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

grad_accumulation_steps = 4
max_grad_norm = 0.5
_gb.setup()
batches = [(torch.randn(8, 10), torch.randn(8, 3) * 3) for _ in range(8)]
model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.SiLU(), torch.nn.Linear(32, 3))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for i, (x, mel) in enumerate(batches):
    sync_gradients = (i + 1) % grad_accumulation_steps == 0
    loss = F.mse_loss(model(x), mel) / grad_accumulation_steps
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)  # BUG
    # FIX: if sync_gradients:
    # FIX:     torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    if sync_gradients:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
