"""skip-ganomaly update_netg: the latent (feature-matching) loss `err_g_lat` compares the discriminator's features of the real image with those of `fake.detach()`, so it is added to the generator loss with its weight but contributes no gradient to the generator; only the adversarial and contextual terms train it.

source: samet-akcay/skip-ganomaly#5 (https://github.com/samet-akcay/skip-ganomaly/issues/5), "latent loss backward problem": "I notice that the err_g_lat is added to update the generator parameters, however, this loss is acquired when the x_fake is detached. I think it makes no contribution to update the parameters of the generator, can someone explain that?" A second user: "I have the same question". The issue is open with no maintainer reply. The code was not read: update_netg follows the description (err_g = err_g_adv * w_adv + err_g_con * w_con + err_g_lat * w_lat; err_g.backward(); optimizer_g.step(), netg.zero_grad() first), the discriminator's update clears before its own backward; the U-Net generator and the discriminator are reduced to small MLPs. The twin takes the latent features from the fake without detaching it
family: gan-detached
shape: generator MLP 12-24-12, discriminator MLP 12-16 features + 1 logit; Adam(lr=2e-3) each; w_adv = 1, w_con = 50, w_lat = 1; 5 iterations of G step then D step
numeric: the generator's update lacks the latent loss's gradient
watch: out: which losses should reach the generator is the program's intent; every gradient present is applied once and cleared
lint: out: a detach inside a loss expression is the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class D(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.LeakyReLU(0.2))
        self.classifier = torch.nn.Linear(16, 1)

    def forward(self, x):
        f = self.features(x)
        return self.classifier(f), f


_gb.setup()
netg = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 12))
netd = D()
_gb.start(netg, netd)
optimizer_g = torch.optim.Adam(netg.parameters(), lr=2e-3)
optimizer_d = torch.optim.Adam(netd.parameters(), lr=2e-3)
w_adv, w_con, w_lat = 1.0, 50.0, 1.0
for it in range(5):
    real = torch.randn(16, 12)
    fake = netg(real + 0.1 * torch.randn_like(real))
    netg.zero_grad()
    pred_fake, _ = netd(fake)
    _, feat_real = netd(real)
    _, feat_fake = netd(fake.detach())  # BUG
    # FIX: _, feat_fake = netd(fake)
    err_g_adv = F.binary_cross_entropy_with_logits(pred_fake, torch.ones_like(pred_fake))
    err_g_con = F.l1_loss(fake, real)
    err_g_lat = F.mse_loss(feat_fake, feat_real)
    err_g = err_g_adv * w_adv + err_g_con * w_con + err_g_lat * w_lat
    err_g.backward()
    optimizer_g.step()
    netd.zero_grad()
    pred_real, _ = netd(real)
    pred_fake, _ = netd(fake.detach())
    err_d = (F.binary_cross_entropy_with_logits(pred_real, torch.ones_like(pred_real))
             + F.binary_cross_entropy_with_logits(pred_fake, torch.zeros_like(pred_fake))) * 0.5
    err_d.backward()
    optimizer_d.step()
_gb.done(netg, netd)
