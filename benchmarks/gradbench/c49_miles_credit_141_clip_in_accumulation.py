"""CREDIT trainer: gradient clipping on scaled gradients inside an accumulation loop.

source: NCAR/miles-credit#141 (https://github.com/NCAR/miles-credit/pull/141), "Gradscaler for grap clipping fix": "fixes gradscaler for grad clipping by unscaling the gradient before clipping"
family: clip-before-unscale
shape: for each of grad_accum_every sub-batches: scaler.scale(loss / grad_accum_every).backward(); then if grad_max_norm > 0: torch.nn.utils.clip_grad_norm_(model.parameters(), grad_max_norm); scaler.step(optimizer); scaler.update(); optimizer.zero_grad()
numeric: the window's accumulated gradient is clipped at 1/65536 of grad_max_norm: the weather model hardly moves
watch: GG112
lint: GG112
bug-step: 1
"""
import torch

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 6))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.amp.GradScaler("cpu")
grad_accum_every, grad_max_norm = 2, 1.0
for step in range(4):
    for i in range(grad_accum_every):
        x = torch.randn(8, 6)
        y_pred = model(x)
        loss = torch.nn.functional.l1_loss(y_pred, x.roll(1, dims=1))
        scaler.scale(loss / grad_accum_every).backward()
    # FIX: scaler.unscale_(optimizer)
    if grad_max_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
_gb.done(model)
