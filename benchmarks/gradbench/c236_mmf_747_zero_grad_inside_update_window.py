"""MMF's trainer with `update_frequency` > 1 (gradient accumulation): `start_update`, which zeroes the gradients, was called at the wrong point of the loop, so the gradients were cleared before each batch's backward instead of after each update: the batches of an update window are not accumulated and each update applies only the window's last batch (divided by update_frequency).

source: facebookresearch/mmf#747 (https://github.com/facebookresearch/mmf/pull/747), "[fix] fix gradient accumulation when update_frequency != 1": "The issue is caused by \"start_update\" being called at an irregular time so the gradients are actually not being accumulated in between update_frequency. When optimizer's `zero_grad` is called, grad is manually set to zero and therefore the gradients are not being accumulated. This fix made it so that `zero_grad` is called in the correct interval" (addresses #626). The trainer mixins were not read: the loop is written with the clear before every batch as the description says, the loss divided by update_frequency; the multimodal model is reduced to an MLP classifier. The twin clears only after each update, the pull request's fix
family: misplaced-clear
shape: AdamW(lr=1e-4), update_frequency = 2; 8 batches of 8
numeric: each update applies one batch's gradient at half scale instead of the window's mean
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

update_frequency = 2
_gb.setup()
batches = [(torch.randn(8, 12), torch.randint(0, 3, (8,))) for _ in range(8)]
model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 3))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for num_batches, (x, y) in enumerate(batches, start=1):
    optimizer.zero_grad()  # BUG
    loss = F.cross_entropy(model(x), y) / update_frequency
    loss.backward()
    if num_batches % update_frequency == 0:
        optimizer.step()
        # FIX: optimizer.zero_grad()
_gb.done(model)
