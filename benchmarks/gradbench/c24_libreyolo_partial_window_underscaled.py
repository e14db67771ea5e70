"""LibreYOLO VLA trainer: the final partial window still divides each loss by the full accumulation count.

source: LibreYOLO/libreyolo#857 (https://github.com/LibreYOLO/libreyolo/pull/857), review finding "Partial Updates Are Underscaled" on libreyolo/models/vla/training/trainer.py ("a one-step remainder with accumulate=2 receives half the intended gradient")
family: underscaled-window
shape: (loss / cfg.accumulate).backward() for every step; optimizer steps when (step + 1) % accumulate == 0 or at steps_per_epoch; steps_per_epoch is not a multiple of accumulate
numeric: the last update of each epoch has K' < K micro-batches each divided by K: its gradient is K'/K of the mean (here 1/3)
watch: GG111
lint: GG111
bug-step: 3
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
policy = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
_gb.start(policy)
accumulate, steps_per_epoch = 3, 7
train_loader = [(torch.randn(4, 6), torch.randn(4, 3)) for _ in range(steps_per_epoch)]
optimizer.zero_grad(set_to_none=True)
for step, (obs, action) in enumerate(train_loader):
    if step >= steps_per_epoch:
        break
    loss = F.mse_loss(policy(obs), action)
    (loss / accumulate).backward()  # BUG
    # FIX: (loss / min(accumulate, steps_per_epoch - step // accumulate * accumulate)).backward()
    if (step + 1) % accumulate == 0 or step + 1 == steps_per_epoch:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
_gb.done(policy)
