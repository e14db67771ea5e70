"""BigGAN: several discriminator steps per generator step without clearing in between.

source: ajbrock/BigGAN-PyTorch#25 (https://github.com/ajbrock/BigGAN-PyTorch/issues/25), "Any reason you don't zero optimizer between Discriminator training steps?"; the author: "Good catch--this was a typo! Fixed"
family: gan-stale
shape: for step_index in range(num_D_steps): D forward on real and fake, D loss backward, D.optim.step(); the D.optim.zero_grad() sat outside that loop
numeric: the k-th D step of a round applies the sum of the round's first k D gradients
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
G = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 6))
D = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
D_optim = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.0, 0.999))
G_optim = torch.optim.Adam(G.parameters(), lr=5e-5, betas=(0.0, 0.999))
_gb.start(G, D)
num_D_steps = 2
for it in range(4):
    D_optim.zero_grad()  # BUG
    for step_index in range(num_D_steps):
        # FIX: D_optim.zero_grad()
        real, z = torch.randn(8, 6) + 1.0, torch.randn(8, 4)
        with torch.no_grad():
            fake = G(z)
        D_loss = F.relu(1.0 - D(real)).mean() + F.relu(1.0 + D(fake)).mean()
        D_loss.backward()
        D_optim.step()
    G_optim.zero_grad()
    G_loss = -D(G(torch.randn(8, 4))).mean()
    G_loss.backward()
    G_optim.step()
_gb.done(G, D)
