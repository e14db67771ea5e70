"""refiners' Trainer with gradient accumulation: the gradient norm was computed and clipped after every backward pass (every accumulation step) instead of once, before each optimizer step, so each window's partial sums are clipped on the way and the gradient the optimizer applies is not the clipped sum of the window.

source: finegrain-ai/refiners#326 (https://github.com/finegrain-ai/refiners/pull/326), "Switch gradient clipping to native torch torch.nn.utils.clip_grad_norm_" (merged): "we switch from clipping after each backward step to clipping before each optimization step, following the convention set by PyTorch. This is not equivalent to the previous behavior when `gradient_accumulation > 1`." The trainer was not read: the case follows the description (the loss divided by the accumulation count, the clip after each backward before the change, before the step after it); the model is reduced to an MLP regressor, the clip to torch.nn.utils.clip_grad_norm_ at max_norm 1.0. The twin clips only before the step, the pull request's change
family: clip-in-accumulation
shape: AdamW(lr=1e-3), gradient_accumulation = 4, clip max_norm = 1.0; micro-batches of 8, 3 steps
numeric: each window's gradient is clipped four times in pieces instead of once in total
watch: GG115
lint: GG115
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation = 4
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.SiLU(), torch.nn.Linear(32, 1))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = [(x, 4 * x.sum(1, keepdim=True)) for x in (torch.randn(8, 10) for _ in range(12))]
for step, (x, y) in enumerate(batches, start=1):
    loss = F.mse_loss(model(x), y) / gradient_accumulation
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # BUG
    if step % gradient_accumulation == 0:
        # FIX: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
