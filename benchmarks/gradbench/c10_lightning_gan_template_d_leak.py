"""GAN template where the generator's backward pass leaks into the discriminator's step.

source: Lightning-AI/pytorch-lightning#557 (https://github.com/Lightning-AI/pytorch-lightning/issues/557), "The gan template does not seem to set properly the gradients of the discriminator to zero"; fix attempt #666
family: gan-stale
shape: per batch, first the generator step (its loss back-propagates through D and fills D's .grad), then the discriminator step; D's gradients are cleared only after D's step, so the G loss's gradient is in D's update
numeric: the discriminator update is D's own gradient plus the generator loss's gradient with respect to D (which pushes D the wrong way)
watch: out: the leaked gradient was never applied by an earlier step (not stale); the watch has no rule for a gradient from another model's loss
lint: out: clearing after each step is the correct pattern in general; telling which loss should reach D needs the data flow
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
generator = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 6))
discriminator = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-3)
opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-3)
_gb.start(generator, discriminator)
for batch_idx in range(5):
    real, z = torch.randn(8, 6) + 1.0, torch.randn(8, 4)
    # optimizer_idx 0: generator
    g_loss = F.binary_cross_entropy_with_logits(discriminator(generator(z)), torch.ones(8, 1))
    g_loss.backward()
    opt_g.step()
    opt_g.zero_grad()
    # FIX: opt_d.zero_grad()
    # optimizer_idx 1: discriminator
    real_loss = F.binary_cross_entropy_with_logits(discriminator(real), torch.ones(8, 1))
    fake_loss = F.binary_cross_entropy_with_logits(discriminator(generator(z).detach()), torch.zeros(8, 1))
    d_loss = (real_loss + fake_loss) / 2
    d_loss.backward()
    opt_d.step()
    opt_d.zero_grad()
_gb.done(generator, discriminator)
