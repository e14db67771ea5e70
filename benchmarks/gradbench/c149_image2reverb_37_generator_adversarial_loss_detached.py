"""Image2Reverb model.py training_step: in the generator's step the discriminator is run on `fake_spec.detach()`, so the adversarial loss G_loss1 sends no gradient to the generator and only the L1 term G_loss2 trains it.

source: nikhilsinghmus/image2reverb#37 (https://github.com/nikhilsinghmus/image2reverb/issues/37), "Is fake_spec.detach() in Generator training step intentional?": "When training the Generator (optimizer_idx == 0 or 1), fake_spec.detach() is passed to the Discriminator (line 102 in model.py): d_fake2 = self.d(fake_spec.detach(), f); G_loss1 = F.mse_loss(d_fake2, torch.ones(d_fake2.shape)) ... .detach() here would cut the gradient path from d_fake2 back to fake_spec, meaning G_loss1 would not propagate gradients into the Generator". The author (nikhilsinghmus): "You're right, that .detach() should not be there for the generator step and is a bug." The quoted lines are followed; the Lightning module with per-optimizer training_step is written as the equivalent plain loop (generator step, then discriminator step, each clearing its own optimizer), the image encoder and spectrogram generator are reduced to MLPs, the discriminator is conditioned on the image features f. The twin passes fake_spec itself, as the author confirms
family: gan-detached
shape: f = enc(image); fake_spec = g(f); G step: d_fake2 = d(fake_spec.detach(), f) (BUG; fix: d(fake_spec, f)); G_loss1 = mse(d_fake2, 1); G_loss2 = l1(fake_spec, spec); G_loss = G_loss1 + 100 * G_loss2; opt_g.zero_grad(); G_loss.backward(); opt_g.step(); D step: mse(d(spec, f), 1) + mse(d(fake_spec.detach(), f), 0). Adam(lr=4e-4) each, 6 iterations
numeric: the generator's updates lack the adversarial term's gradient
watch: out: which losses should reach the generator is the program's intent; every gradient present is applied once and cleared
lint: out: a detach inside a loss expression is the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import _gb

_gb.setup()
enc = nn.Linear(10, 6)
g = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 12))
d_net = nn.Sequential(nn.Linear(12 + 6, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))


def d(spec, f):
    return d_net(torch.cat([spec, f], -1))


_gb.start(enc, g, d_net)
opt_g = torch.optim.Adam(list(enc.parameters()) + list(g.parameters()), lr=4e-4, betas=(0.0, 0.99))
opt_d = torch.optim.Adam(d_net.parameters(), lr=4e-4, betas=(0.0, 0.99))
for it in range(6):
    image, spec = torch.randn(8, 10), torch.randn(8, 12)
    f = enc(image)
    fake_spec = g(f)
    d_fake2 = d(fake_spec.detach(), f)  # BUG
    # FIX: d_fake2 = d(fake_spec, f)
    G_loss1 = F.mse_loss(d_fake2, torch.ones(d_fake2.shape))
    G_loss2 = F.l1_loss(fake_spec, spec)
    G_loss = G_loss1 + 100 * G_loss2
    opt_g.zero_grad()
    G_loss.backward()
    opt_g.step()
    f = f.detach()
    D_loss = F.mse_loss(d(spec, f), torch.ones(8, 1)) + F.mse_loss(d(fake_spec.detach(), f), torch.zeros(8, 1))
    opt_d.zero_grad()
    D_loss.backward()
    opt_d.step()
_gb.done(enc, g, d_net)
