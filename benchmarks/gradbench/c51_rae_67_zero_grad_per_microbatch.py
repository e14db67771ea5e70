"""RAE train.py: optimizer.zero_grad(set_to_none=True) inside the micro-batch loop clears the accumulated gradient.

source: bytetriper/RAE#67 (https://github.com/bytetriper/RAE/issues/67), "train.py: zero_grad is called per microbatch, breaking gradient accumulation" (fix proposed in bytetriper/RAE#78)
family: misplaced-clear
shape: for each micro-batch of the step: optimizer.zero_grad(set_to_none=True); loss = loss_fn(...) / grad_accum_steps; loss.backward(); after the micro-batch loop: optimizer.step()
numeric: each step applies only the last micro-batch's gradient, divided by grad_accum_steps
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 8))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
grad_accum_steps = 4
for step in range(3):
    # FIX: optimizer.zero_grad(set_to_none=True)
    for micro in range(grad_accum_steps):
        optimizer.zero_grad(set_to_none=True)  # BUG
        x = torch.randn(4, 8)
        loss = F.mse_loss(model(x), x) / grad_accum_steps
        loss.backward()
    optimizer.step()
_gb.done(model)
