"""Applio (RVC) train.py: after the discriminator's `scaler.step(optim_d)` and the generator's `scaler.step(optim_g)` / `scaler.update()`, the loop also calls `optim_g.step()` and `optim_d.step()`, so each optimizer steps a second time per iteration on whatever its gradients hold then: the generator's gradient again, and for the discriminator its own gradient plus the still-scaled gradient the generator loss left in it.

source: IAHispano/Applio#860 (https://github.com/IAHispano/Applio/pull/860), "optimizer step bugfix": "Fixed the incorrect use of scalers in relation to optim steps. Simply remove both: optim_g.step() optim_d.step() at lines: 433 and 434. RVC and Applio use AMP and so, GradScaler and autocast ... You should not use optim.step() directly when you're working with GradScaler. If you do, you would bypass the necessary gradient scaling and unscaling steps". Tested by "Debugging NaNs, Infs and values/params in gradients of Generator and Discriminator". The pull request was closed without merge; another contributor (AznamirWoW): "added the same change to my PR". train.py was not read: the iteration follows RVC's train_and_evaluate (discriminator: optim_d.zero_grad(); scaler.scale(loss_disc).backward(); scaler.unscale_(optim_d); scaler.step(optim_d); generator: losses through net_d on the non-detached y_hat; optim_g.zero_grad(); scaler.scale(loss_gen_all).backward(); scaler.unscale_(optim_g); scaler.step(optim_g); scaler.update(); then the two extra steps); the networks are reduced to MLPs, the losses to least-squares GAN losses plus an L1 reconstruction. The twin removes the two extra steps, as the pull request does
family: misplaced-step
shape: AdamW(lr=1e-4, betas=(0.8, 0.99)) for each as RVC; GradScaler("cpu"); 5 iterations
numeric: each iteration applies the generator's gradient twice and a scaled leaked gradient to the discriminator
watch: GG101
lint: GG101
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
net_g = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16))
net_d = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LeakyReLU(0.1), torch.nn.Linear(32, 1))
_gb.start(net_g, net_d)
optim_g = torch.optim.AdamW(net_g.parameters(), lr=1e-4, betas=(0.8, 0.99))
optim_d = torch.optim.AdamW(net_d.parameters(), lr=1e-4, betas=(0.8, 0.99))
scaler = torch.amp.GradScaler("cpu")
for it in range(5):
    phone, wave = torch.randn(8, 16), torch.randn(8, 16)
    y_hat = net_g(phone)
    y_d_hat_r, y_d_hat_g = net_d(wave), net_d(y_hat.detach())
    loss_disc = ((1 - y_d_hat_r) ** 2).mean() + (y_d_hat_g ** 2).mean()
    optim_d.zero_grad()
    scaler.scale(loss_disc).backward()
    scaler.unscale_(optim_d)
    scaler.step(optim_d)
    y_d_hat_g = net_d(y_hat)
    loss_gen = ((1 - y_d_hat_g) ** 2).mean()
    loss_gen_all = loss_gen + 45 * F.l1_loss(y_hat, wave)
    optim_g.zero_grad()
    scaler.scale(loss_gen_all).backward()
    scaler.unscale_(optim_g)
    scaler.step(optim_g)
    scaler.update()
    optim_g.step()  # BUG
    optim_d.step()  # BUG
_gb.done(net_g, net_d)
