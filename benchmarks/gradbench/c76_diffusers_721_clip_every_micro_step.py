"""diffusers train_unconditional: accelerator.clip_grad_norm_ runs on every micro-step of an accumulation window.

source: huggingface/diffusers#721 (https://github.com/huggingface/diffusers/pull/721), "[train_unconditional] fix applying clip_grad_norm_" (merged): "Fix gradient clipping when doing gradient accumulation. The gradients needs to clipped after they are synchronized when doing accumulation"
family: clip-in-accumulation
shape: with accelerator.accumulate(model): noise_pred = model(noisy_images, timesteps); loss = F.mse_loss(noise_pred, noise); accelerator.backward(loss); accelerator.clip_grad_norm_(model.parameters(), 1.0); optimizer.step(); lr_scheduler.step(); optimizer.zero_grad(). Fixed: the clip only under `if accelerator.sync_gradients:`. Accelerate 1.x on the CPU, gradient_accumulation_steps=4
numeric: each partial sum of the window is clipped to norm 1 before the next micro-batch is added, so the applied gradient is neither the window mean nor its clipped value
watch: GG115
lint: GG115
bug-step: 1
"""
import torch
import torch.nn.functional as F
from accelerate import Accelerator

import _gb


class Denoiser(torch.nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(dim + 1, 32), torch.nn.SiLU(), torch.nn.Linear(32, dim))

    def forward(self, x, t):
        return {"sample": self.net(torch.cat([x, t[:, None]], dim=1))}


_gb.setup()
accelerator = Accelerator(gradient_accumulation_steps=4, cpu=True)
model = Denoiser()
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
lr_scheduler = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0)
model, optimizer, lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)
for step in range(12):
    clean_images = 3 * torch.randn(8, 16)
    noise = torch.randn(8, 16)
    timesteps = torch.rand(8)
    noisy_images = (1 - timesteps[:, None]) * clean_images + timesteps[:, None] * noise
    with accelerator.accumulate(model):
        noise_pred = model(noisy_images, timesteps)["sample"]
        loss = F.mse_loss(noise_pred, clean_images)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)  # BUG
        # FIX: if accelerator.sync_gradients:
        # FIX:     accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        lr_scheduler.step()
        optimizer.zero_grad()
_gb.done(accelerator.unwrap_model(model))
