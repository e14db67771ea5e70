"""torchseq: the optimizer steps only once the accumulated batch size passes a threshold; the epoch's last batches are never applied.

source: tomhosking/torchseq#8 (https://github.com/tomhosking/torchseq/issues/8), "Gradient accumulation bug": "the last batch(es) of an epoch will be ignored if they don't sum up to the threshold"; fixed in 53c96f3d
family: dropped-window
shape: steps_accum += batch_size after each backward; if steps_accum >= optim_batch_size: step, zero_grad, reset; nothing steps the remainder when the loader ends
numeric: the epoch's final examples never influence training; their gradient stays in .grad (and leaks into the next epoch's first window)
watch: GG103
lint: GG103
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Linear(6, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
_gb.start(model)
optim_batch_size = 16
data, target = torch.randn(44, 6), torch.randint(0, 3, (44,))
steps_accum, pending = 0, 0
for start in range(0, 44, 6):
    x, y = data[start:start + 6], target[start:start + 6]
    loss = F.cross_entropy(model(x), y, reduction="sum") / optim_batch_size
    loss.backward()
    steps_accum += len(x)
    if steps_accum >= optim_batch_size:
        optimizer.step()
        optimizer.zero_grad()
        steps_accum = 0
# FIX: if steps_accum > 0:
# FIX:     for p in model.parameters():
# FIX:         p.grad.mul_(optim_batch_size / steps_accum)
# FIX:     optimizer.step()
# FIX:     optimizer.zero_grad()
_gb.done(model)
