"""stylegan2_pytorch training: the loss functions return their loss tensors and the trainer keeps them for its running statistics, so every iteration's computation graph (its saved activations) stays in memory until the statistics are reset, which ran the GPU out of memory during `loss.backward()`.

source: adriansahlman/stylegan2_pytorch#11 (https://github.com/adriansahlman/stylegan2_pytorch/pull/11), "Fixes for CUDA memory issues" (merged): "apparently, the memory issues during loss.backwards() were due to saving the computation graph for loss for each iteration. I changed some of the losses to return only scalars, and it solved the memory problem I was facing." The trainer was not read: the statistics are a dict of per-name running sums of the returned losses, reset every 8 iterations (the logging interval), as the description implies; the networks are reduced to MLPs with a non-saturating logistic loss. The twin accumulates the losses' values (.item()), what returning scalars gives
family: graph-logging
shape: Adam(lr=2e-3, betas=(0.0, 0.99)) for G and D; 6 iterations of batch 16; statistics reset every 8 iterations
numeric: the 6 iterations' generator and discriminator graphs stay alive at the end
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


def G_logistic_ns(G, D, latents):
    return F.softplus(-D(G(latents))).mean()


def D_logistic(G, D, latents, reals):
    fake_scores = D(G(latents).detach())
    return F.softplus(fake_scores).mean() + F.softplus(-D(reals)).mean()


_gb.setup()
G = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.LeakyReLU(0.2), torch.nn.Linear(32, 16))
D = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LeakyReLU(0.2), torch.nn.Linear(32, 1))
_gb.start(G, D)
G_opt = torch.optim.Adam(G.parameters(), lr=2e-3, betas=(0.0, 0.99))
D_opt = torch.optim.Adam(D.parameters(), lr=2e-3, betas=(0.0, 0.99))
stats = {}
for it in range(6):
    if it % 8 == 0:
        stats = {"G_loss": 0.0, "D_loss": 0.0}
    reals = torch.randn(16, 16) + 2.0
    D_loss = D_logistic(G, D, torch.randn(16, 8), reals)
    D_opt.zero_grad()
    D_loss.backward()
    D_opt.step()
    G_loss = G_logistic_ns(G, D, torch.randn(16, 8))
    G_opt.zero_grad()
    G_loss.backward()
    G_opt.step()
    for name, value in (("G_loss", G_loss), ("D_loss", D_loss)):
        stats[name] = stats[name] + value  # BUG
        # FIX: stats[name] = stats[name] + value.item()
_gb.done(G, D, kept=[v for v in stats.values() if isinstance(v, torch.Tensor)])
