"""open-universe's GAN training: the discriminators' parameter list is built as `list(loss_mrd.parameters()) + list(loss_mrd.parameters())` (the MRD twice) where the second term should be `loss_mpd`, so the multi-period discriminator receives gradients but is never optimized, and the multi-resolution discriminator's parameters appear twice in the optimizer (each stepped twice per update).

source: line/open-universe#5 (https://github.com/line/open-universe/issues/5), the report quotes `params_disc = list(self.loss_mrd.parameters()) + list(self.loss_mrd.parameters())`; the maintainer: "Ouch... ... the MPD was never optimized". The model code beyond the quoted line was not read; the generator is reduced to an MLP, the MPD and MRD to two small MLP discriminators with least-squares GAN losses, AdamW to Adam. The twin builds the list from loss_mrd and loss_mpd
family: orphan
shape: Adam(lr=1e-3) for the generator and for the discriminators, 4 iterations of 16 samples, discriminator step then generator step
numeric: the MPD keeps its initial weights; the MRD is stepped twice per update
watch: GG106
lint: out: which modules a parameter list concatenates is known only when the lists are built
bug-step: 1
"""
import warnings

import torch

import _gb

warnings.filterwarnings("ignore", message=".*duplicate parameters.*")


def disc():
    return torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.LeakyReLU(0.1), torch.nn.Linear(32, 1))


_gb.setup()
generator = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 24))
loss_mrd, loss_mpd = disc(), disc()
_gb.start(loss_mpd, loss_mrd)
params_disc = list(loss_mrd.parameters()) + list(loss_mrd.parameters())  # BUG
# FIX: params_disc = list(loss_mrd.parameters()) + list(loss_mpd.parameters())
optimizer_disc = torch.optim.Adam(params_disc, lr=1e-3)
optimizer_gen = torch.optim.Adam(generator.parameters(), lr=1e-3)
for it in range(4):
    real, noise = torch.randn(16, 24), torch.randn(16, 8)
    fake = generator(noise)
    d_loss = sum(((d(real) - 1) ** 2).mean() + (d(fake.detach()) ** 2).mean() for d in (loss_mrd, loss_mpd))
    optimizer_disc.zero_grad()
    d_loss.backward()
    optimizer_disc.step()
    g_loss = sum(((d(fake) - 1) ** 2).mean() for d in (loss_mrd, loss_mpd)) + (fake - real).abs().mean()
    optimizer_gen.zero_grad()
    g_loss.backward()
    optimizer_gen.step()
_gb.done(loss_mpd, loss_mrd)
