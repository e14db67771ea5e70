"""GAN step that never clears the discriminator's gradients.

source: Adversarial-Deep-Learning/code-soup#69 (https://github.com/Adversarial-Deep-Learning/code-soup/issues/69), "Zero Grad and Generator error missing in GAN", fixed in #74
family: gan-stale
shape: GAN.step() trains D on real and fake batches, then G; it calls generator.zero_grad() but never discriminator.zero_grad()
numeric: each D update applies the sum of all earlier D gradients, plus the gradient the G loss leaves in D's .grad
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class GAN:
    def __init__(self):
        self.generator = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 6))
        self.discriminator = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        self.optD = torch.optim.Adam(self.discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))
        self.optG = torch.optim.Adam(self.generator.parameters(), lr=2e-3, betas=(0.5, 0.999))

    def step(self, real):
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)
        # FIX: self.discriminator.zero_grad()
        errD_real = F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
        errD_real.backward()
        fake = self.generator(torch.randn(len(real), 4))
        errD_fake = F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros)
        errD_fake.backward()
        self.optD.step()
        self.generator.zero_grad()
        errG = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
        errG.backward()
        self.optG.step()
        return errD_real + errD_fake, errG


_gb.setup()
gan = GAN()
_gb.start(gan.generator, gan.discriminator)
for it in range(5):
    gan.step(torch.randn(8, 6) + 1.0)
_gb.done(gan.generator, gan.discriminator)
