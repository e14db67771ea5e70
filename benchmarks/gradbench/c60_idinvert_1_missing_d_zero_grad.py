"""In-domain GAN inversion encoder training: optimizer_D.zero_grad() missing before the discriminator's backward.

source: Hsintien-Ng/idinvert_pytorch-reproduced#1 (https://github.com/Hsintien-Ng/idinvert_pytorch-reproduced/issues/1), "optimizer_D.zero_grad() missing?" in training_loop_encoder.py; the author: "You're right. Sorry I forgot to add it. I have fixed it."
family: gan-stale
shape: per iteration: loss_D = D(real) and D(E-reconstruction) terms; loss_D.backward(); optimizer_D.step() with no optimizer_D.zero_grad(); then optimizer_E.zero_grad(); loss_E.backward(); optimizer_E.step()
numeric: every discriminator update applies all earlier discriminator gradients again (plus what the encoder loss left in D's .grad)
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
E = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh())
G = torch.nn.Linear(4, 6)
D = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LeakyReLU(0.2), torch.nn.Linear(8, 1))
for p in G.parameters():
    p.requires_grad_(False)
_gb.start(E, D)
optimizer_E = torch.optim.Adam(E.parameters(), lr=1e-3, betas=(0.9, 0.99))
optimizer_D = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.9, 0.99))
for it in range(5):
    x_real = torch.randn(8, 6)
    x_rec = G(E(x_real))
    # FIX: optimizer_D.zero_grad()
    loss_D = F.softplus(D(x_rec.detach())).mean() + F.softplus(-D(x_real)).mean()
    loss_D.backward()
    optimizer_D.step()
    optimizer_E.zero_grad()
    loss_E = F.mse_loss(x_rec, x_real) + 0.1 * F.softplus(-D(x_rec)).mean()
    loss_E.backward()
    optimizer_E.step()
_gb.done(E, D)
