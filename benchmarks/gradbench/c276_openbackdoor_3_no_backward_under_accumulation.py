"""OpenBackdoor's trainer: the loss is divided by the accumulation count in one branch and backpropagated in the other (`if self.gradient_accumulation_steps > 1: loss = loss / self.gradient_accumulation_steps` / `else: loss.backward()`), so with accumulation on no backward pass ever runs and every optimizer step finds no gradient.

source: thunlp/OpenBackdoor#3 (https://github.com/thunlp/OpenBackdoor/pull/3), a fix that moves `loss.backward()` out of the else branch of the accumulation test in the trainer's train_one_epoch (read). The victim model (a BERT classifier) is reduced to an MLP over 32 features with 2 classes; the clip and the scheduler are kept, AdamW to SGD. The twin backpropagates after the division
family: missing-backward
shape: SGD(lr=0.1), gradient_accumulation_steps 2, max_grad_norm 1.0, 8 batches of 16, a linear schedule
numeric: the bug never updates the model
watch: GG110
lint: out: the backward is written, on a branch that accumulation never takes; which branch runs is configuration
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps = 2
max_grad_norm = 1.0
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / 8)
model.zero_grad()
for step in range(8):
    x, y = torch.randn(16, 32), torch.randint(0, 2, (16,))
    loss = F.cross_entropy(model(x), y)
    if gradient_accumulation_steps > 1:
        loss = loss / gradient_accumulation_steps
    else:  # BUG
        loss.backward()  # BUG
    # FIX: loss.backward()
    if (step + 1) % gradient_accumulation_steps == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        scheduler.step()
        model.zero_grad()
_gb.done(model)
