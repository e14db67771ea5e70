"""OmniTokenizer VQGAN training: the generator's adversarial loss is backpropagated through the discriminator, and under gradient accumulation nothing clears the discriminator's gradients before its own loss, so its update also applies the generator loss's gradient.

source: FoundationVision/OmniTokenizer#15 (https://github.com/FoundationVision/OmniTokenizer/issues/15), "maybe bugs in loss backward?": "you generate fake sample and let it goes through the generator and discriminator to compute the adversial loss of generator, when backward this loss, the weights of discriminator will also accumulate grads of generator loss. However, since you use grad accumulation, the optimizer will not zero grads before backward, then we will update the discriminator using some grads from generator loss!"; a second user agrees. Open, no maintainer reply (unconfirmed). The issue quotes no code beyond omnitokenizer.py#L548, so the loop is the one it describes: both losses backpropagated per micro-batch, both optimizers stepped and cleared once per window. The twin keeps the discriminator out of the generator loss's backward (requires_grad off while it runs), as Lightning's toggle_optimizer does
family: gan-stale
shape: for i, x in enumerate(loader): recon = model(x); aeloss = F.l1_loss(recon, x) - 0.1 * disc(recon).mean(); (aeloss / accum).backward(); discloss = hinge(disc(x), disc(recon.detach())); (discloss / accum).backward(); if (i + 1) % accum == 0: opt_ae.step(); opt_disc.step(); opt_ae.zero_grad(); opt_disc.zero_grad(). accum = 2, Adam
numeric: every discriminator update also applies the generator's adversarial gradient with respect to the discriminator (the opposite of its own objective)
watch: out: the leaked gradient was never applied by an earlier step (not stale); the watch has no rule for a gradient from another model's loss
lint: out: which loss should reach the discriminator needs the data flow of both losses
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 8))
disc = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1))
_gb.start(model, disc)
opt_ae = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.5, 0.9))
opt_disc = torch.optim.Adam(disc.parameters(), lr=1e-3, betas=(0.5, 0.9))
accum = 2
loader = [torch.randn(8, 8) for _ in range(8)]
for i, x in enumerate(loader):
    recon = model(x)
    # FIX: disc.requires_grad_(False)
    aeloss = F.l1_loss(recon, x) - 0.1 * disc(recon).mean()
    (aeloss / accum).backward()
    # FIX: disc.requires_grad_(True)
    logits_real, logits_fake = disc(x), disc(recon.detach())
    discloss = 0.5 * (F.relu(1.0 - logits_real).mean() + F.relu(1.0 + logits_fake).mean())
    (discloss / accum).backward()
    if (i + 1) % accum == 0:
        opt_ae.step()
        opt_disc.step()
        opt_ae.zero_grad()
        opt_disc.zero_grad()
_gb.done(model, disc)
