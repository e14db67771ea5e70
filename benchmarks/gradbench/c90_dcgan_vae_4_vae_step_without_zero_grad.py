"""dcgan_vae_pytorch: the VAE update of netG runs without netG.zero_grad(), re-applying the previous adversarial gradient.

source: seangal/dcgan_vae_pytorch#4 (https://github.com/seangal/dcgan_vae_pytorch/issues/4), "When optimizing netG with VAE loss, why not use netG.zero_grad()?"; the author: "you are right, this is a mistake" (main.py read: netG.zero_grad() only before step (3))
family: missing-clear
shape: per batch: (1) netD.zero_grad(); errD_real.backward(); gen = netG.decoder(noise); errD_fake = criterion(netD(gen.detach()), fake); errD_fake.backward(); optimizerD.step(); (2) VAE: encoded = netG.encoder(input); KLD; rec = netG.decoder(netG.sampler(encoded)); VAEerr = KLD + MSECriterion(rec, input); VAEerr.backward(); optimizerG.step() (no netG.zero_grad()); (3) netG.zero_grad(); errG = criterion(netD(netG(input)), real); errG.backward(); optimizerG.step()
numeric: from the second batch on, every VAE step of netG applies the previous batch's adversarial gradient (already applied by step (3)) again. The author's "it makes a difference just on the first training step" does not hold for this code: netG.grad is empty only before the first VAE step
watch: GG101
lint: GG101
bug-step: 3
"""
import torch
import torch.nn as nn

import _gb


class _netG(nn.Module):
    def __init__(self, nz=4, nx=12):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(nx, 16), nn.LeakyReLU(0.2), nn.Linear(16, 2 * nz))
        self.decoder = nn.Sequential(nn.Linear(nz, 16), nn.ReLU(), nn.Linear(16, nx), nn.Tanh())
        self.nz = nz

    def sampler(self, encoded):
        mu, logvar = encoded
        return mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)

    def encode(self, x):
        h = self.encoder(x)
        return h[:, :self.nz], h[:, self.nz:]

    def forward(self, x):
        return self.decoder(self.sampler(self.encode(x)))


_gb.setup()
netG = _netG()
netD = nn.Sequential(nn.Linear(12, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1), nn.Sigmoid())
_gb.start(netG, netD)
criterion, MSECriterion = nn.BCELoss(), nn.MSELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
for i in range(5):
    input = torch.tanh(torch.randn(8, 12))
    real, fake = torch.ones(8, 1), torch.zeros(8, 1)
    # (1) Update D network
    netD.zero_grad()
    errD_real = criterion(netD(input), real)
    errD_real.backward()
    gen = netG.decoder(torch.randn(8, netG.nz))
    errD_fake = criterion(netD(gen.detach()), fake)
    errD_fake.backward()
    optimizerD.step()
    # (2) Update G network: VAE
    # FIX: netG.zero_grad()
    encoded = netG.encode(input)
    mu, logvar = encoded
    KLD = torch.sum(mu.pow(2).add_(logvar.exp()).mul_(-1).add_(1).add_(logvar)).mul_(-0.5)
    rec = netG.decoder(netG.sampler(encoded))
    VAEerr = KLD + MSECriterion(rec, input)
    VAEerr.backward()
    optimizerG.step()
    # (3) Update G network: maximize log(D(G(z)))
    netG.zero_grad()
    errG = criterion(netD(netG(input)), real)
    errG.backward()
    optimizerG.step()
_gb.done(netG, netD)
