"""NeMo Automodel EAGLE-3 recipe: the micro-batches after an epoch's last full window are backpropagated but never stepped; the next epoch's zero_grad wipes them.

source: NVIDIA-NeMo/Automodel#2257 (https://github.com/NVIDIA-NeMo/Automodel/pull/2257), "fix(eagle3): flush trailing partial grad-accum window each epoch" (merged): "When num_batches_per_epoch is not a multiple of grad_accumulation_steps, the EAGLE-3 recipe's training loop silently dropped the trailing micro-batches: their gradients reached backward() but never an optimizer.step() — the next epoch's zero_grad wiped them"; the fix rescales the partial window "by grad_accumulation_steps / pending_micro_batches" and runs one more clip_grad_norm_ / optimizer.step / lr_scheduler.step / zero_grad
family: dropped-window
shape: recipes/llm/train_eagle3.py: for epoch: optimizer.zero_grad(); for i, batch in enumerate(loader): loss = model(batch) / grad_accumulation_steps; loss.backward(); if (i + 1) % grad_accumulation_steps == 0: clip_grad_norm_; optimizer.step(); lr_scheduler.step(); optimizer.zero_grad(). Fixed twin: after the loop, a pending window is multiplied by grad_accumulation_steps / pending and stepped (clip, step, scheduler, zero_grad). 7 batches per epoch, grad_accumulation_steps = 4, 3 epochs
numeric: 3 of every 7 micro-batches never reach an update; the twin's second step is the flushed window of 3
watch: GG102 GG103
lint: GG102 GG103
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


def train_epoch(model, loader, optimizer, lr_scheduler, grad_accumulation_steps, max_grad_norm):
    optimizer.zero_grad()
    pending = 0
    for i, (x, y) in enumerate(loader):
        loss = F.mse_loss(model(x), y) / grad_accumulation_steps
        loss.backward()
        pending += 1
        if (i + 1) % grad_accumulation_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            pending = 0
    # FIX: if pending:
    # FIX:     for p in model.parameters():
    # FIX:         if p.grad is not None:
    # FIX:             p.grad.mul_(grad_accumulation_steps / pending)
    # FIX:     torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    # FIX:     optimizer.step()
    # FIX:     lr_scheduler.step()
    # FIX:     optimizer.zero_grad()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
loader = [(x, torch.sin(x[:, :4])) for x in (torch.randn(6, 8) for _ in range(7))]
for epoch in range(3):
    train_epoch(model, loader, optimizer, lr_scheduler, grad_accumulation_steps=4, max_grad_norm=10.0)
_gb.done(model)
