"""waifu-diffusion diffusers_trainer.py: with fp16 the loss goes through a `GradScaler` and `torch.nn.utils.clip_grad_norm_(unet.parameters(), args.clip_grad_norm)` runs on the still-scaled gradients (no `scaler.unscale_` first), so the clip threshold acts on gradients `scale` times too large and clips (shrinks) nearly every step.

source: harubaru/waifu-diffusion#64 (https://github.com/harubaru/waifu-diffusion/issues/64), "clip_grad_norm applied to scaled gradients": "On this line, grad clipping occurs: https://github.com/harubaru/waifu-diffusion/blob/27d301c5b96834536166cc2f12e7a9bb4079fb96/trainer/diffusers_trainer.py#L931. However, if fp16 is enabled then the clipping would be applied to the scaled gradients, due to GradScaler. According to PyTorch documentation ... the gradients should be unscaled before clipping. So, this appears to be a bug and could cause fp16 training to result in worse performance than it otherwise should." The issue is open with no reply. The trainer was not read beyond the linked line: the UNet's noise-prediction loss is reduced to a small MLP denoiser, the scaler runs on the CPU (initial scale 65536), autocast is left out. The twin unscales before clipping, as the PyTorch recipe the issue cites does
family: clip-before-unscale
shape: AdamW(lr=5e-4), clip_grad_norm = 1.0, GradScaler("cpu"); 6 steps of zero_grad, scale(loss).backward(), clip, scaler.step, scaler.update
numeric: every step's gradient is clipped to norm 1/scale of the threshold (unscaled), instead of the full gradient
watch: GG112
lint: GG112
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

clip_grad_norm = 1.0
_gb.setup()
unet = torch.nn.Sequential(torch.nn.Linear(17, 32), torch.nn.SiLU(), torch.nn.Linear(32, 16))
_gb.start(unet)
optimizer = torch.optim.AdamW(unet.parameters(), lr=5e-4)
scaler = torch.amp.GradScaler("cpu")
for step in range(6):
    latents = torch.randn(32, 16)
    noise = torch.randn_like(latents)
    t = torch.rand(32, 1)
    noisy = (1 - t).sqrt() * latents + t.sqrt() * noise
    optimizer.zero_grad()
    noise_pred = unet(torch.cat([noisy, t], 1))
    loss = F.mse_loss(noise_pred, noise)
    scaler.scale(loss).backward()
    # FIX: scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(unet.parameters(), clip_grad_norm)
    scaler.step(optimizer)
    scaler.update()
_gb.done(unet)
