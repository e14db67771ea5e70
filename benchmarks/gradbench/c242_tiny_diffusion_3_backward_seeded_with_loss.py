"""tiny-diffusion's DDPM training loop on 2-D point clouds: it calls `loss.backward(loss)`, passing the loss as the backward's gradient argument, so every step's gradient is scaled by that step's loss value (the noise-prediction MSE, about 1 early and falling) before clipping and the AdamW step.

source: tanelp/tiny-diffusion#3 (https://github.com/tanelp/tiny-diffusion/issues/3), "What is the reason for calculating the loss and pass it to the backward function as gradient parameter?": "The end result is that gradients are scaled according to the magnitude of the loss." The author (tanelp): "Hmm, looks like this was committed by mistake. Changed in [726b6bb]. Thanks!" ddpm.py was not read beyond the issue: the loop is the usual DDPM one (random timestep, noised sample, MLP noise predictor with a sinusoidal time embedding, MSE, clip_grad_norm_ 1.0, AdamW); the dataset is a noisy ring of points. The twin calls loss.backward(), the author's change
family: seeded-backward
shape: AdamW(lr=1e-3), clip 1.0, 50 noise steps; 8 steps on batches of 32 points
numeric: every gradient is scaled by the current loss (varying around 1)
watch: out: the seed of the backward pass scales the whole gradient; the buffers receive one pass per step, applied once and cleared
lint: out: the backward's gradient argument is a tensor expression; which seed a loss should get is not a gradient-buffer rule
bug-step: 1
"""
import math

import torch
import torch.nn.functional as F

import _gb


class NoisePredictor(torch.nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(2 + 8, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 2))

    def forward(self, x, t):
        freqs = torch.exp(torch.arange(4) * -math.log(100.0) / 4)
        emb = torch.cat([torch.sin(t[:, None] * freqs), torch.cos(t[:, None] * freqs)], -1)
        return self.net(torch.cat([x, emb], -1))


_gb.setup()
num_timesteps = 50
betas = torch.linspace(1e-4, 0.02, num_timesteps)
alphas_cumprod = torch.cumprod(1 - betas, 0)
angles = torch.rand(8, 32) * 2 * math.pi
batches = [torch.stack([a.cos(), a.sin()], -1) + 0.05 * torch.randn(32, 2) for a in angles]
noises = [torch.randn(32, 2) for _ in range(8)]
timesteps = [torch.randint(0, num_timesteps, (32,)) for _ in range(8)]
model = NoisePredictor()
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for batch, noise, t in zip(batches, noises, timesteps):
    a = alphas_cumprod[t][:, None]
    noisy = a.sqrt() * batch + (1 - a).sqrt() * noise
    loss = F.mse_loss(model(noisy, t.to(noisy.dtype)), noise)
    loss.backward(loss)  # BUG
    # FIX: loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
