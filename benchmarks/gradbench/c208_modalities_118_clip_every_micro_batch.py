"""Modalities trainer with gradient accumulation: the gradient clipping ran after every micro-batch's backward pass instead of once, after the window's last backward and before the optimizer step, so the partial sums of the window are clipped on the way and the gradient the optimizer applies is not the clipped total of the window.

source: Modalities/modalities#118 (https://github.com/Modalities/modalities/pull/118), "refactor: fixed loss logging during gradient accumulation and gradient clipping" (merged, labelled bug; fixes #60): "the gradient clipping is only calculated and logged after # gradient accumulation steps". The trainer was not read: the case follows the description (the loss divided by the accumulation steps, the clip and its norm computed each micro-batch before the change, only at the step after it); the FSDP-wrapped transformer is reduced to an MLP regressor with torch.nn.utils.clip_grad_norm_ at max_norm 0.5. The twin clips only before the step, the pull request's change
family: clip-in-accumulation
shape: AdamW(lr=1e-3), gradient_accumulation_steps = 4, clip_grad_norm_(max_norm=0.5); micro-batches of 8, 3 steps
numeric: each window's gradient is clipped four times in pieces instead of once in total
watch: GG115
lint: GG115
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_acc_steps = 4
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = [(x, 3 * x.sum(1, keepdim=True)) for x in (torch.randn(8, 10) for _ in range(12))]
for step_id, (x, y) in enumerate(data):
    loss = F.mse_loss(model(x), y) / gradient_acc_steps
    loss.backward()
    gradient_norm_score = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)  # BUG
    if (step_id + 1) % gradient_acc_steps == 0:
        # FIX: gradient_norm_score = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
