"""MONAI GenerativeModels VQGAN tutorial: the discriminator's optimizer is never cleared.

source: Project-MONAI/GenerativeModels#102 (https://github.com/Project-MONAI/GenerativeModels/issues/102), "Missing zero_grad in the VQGAN tutorial": "it is missing the zero_grad for the discriminator optimizer" (2d_vqgan_tutorial.py); fixed by Project-MONAI/GenerativeModels#121 (https://github.com/Project-MONAI/GenerativeModels/pull/121), "Add zero_grad and update networks" (merged)
family: gan-stale
shape: per step: optimizer_g.zero_grad(set_to_none=True); reconstruction, quantization_loss = model(images); logits_fake = discriminator(reconstruction)[-1]; generator_loss = adv_loss(logits_fake, target_is_real=True, for_discriminator=False); loss_g = recons_loss + quantization_loss + perceptual_weight * p_loss + adv_weight * generator_loss; loss_g.backward(); optimizer_g.step(); then (no optimizer_d.zero_grad) logits_fake = discriminator(reconstruction.detach())[-1]; logits_real = discriminator(images.detach())[-1]; loss_d = adv_weight * discriminator_loss; loss_d.backward(); optimizer_d.step(). Least-squares adversarial loss as in the tutorial; no perceptual network and no .float() casts (the benchmark runs in float64)
numeric: the discriminator's first step already carries the generator loss's gradient (the generator backward reaches the discriminator), and every later step re-applies all earlier discriminator and generator-loss gradients
watch: GG101
lint: GG101
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Discriminator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LeakyReLU(0.2))
        self.head = torch.nn.Linear(16, 1)

    def forward(self, x):
        features = self.body(x)
        return [features, self.head(features)]


class VQAutoEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.decoder = torch.nn.Linear(16, 4), torch.nn.Linear(4, 16)

    def forward(self, x):
        z = self.encoder(x)
        quantized = z + (torch.round(z) - z).detach()
        quantization_loss = F.mse_loss(quantized.detach(), z)
        return self.decoder(quantized), quantization_loss


def adv_loss(logits, target_is_real):
    return F.mse_loss(logits, torch.ones_like(logits) if target_is_real else torch.zeros_like(logits))


_gb.setup()
model, discriminator = VQAutoEncoder(), Discriminator()
_gb.start(model, discriminator)
optimizer_g = torch.optim.Adam(model.parameters(), lr=1e-3)
optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=5e-3)
adv_weight = 0.01
for step in range(6):
    images = torch.randn(8, 16)
    optimizer_g.zero_grad(set_to_none=True)
    reconstruction, quantization_loss = model(images)
    logits_fake = discriminator(reconstruction.contiguous())[-1]
    recons_loss = F.l1_loss(reconstruction, images)
    generator_loss = adv_loss(logits_fake, target_is_real=True)
    loss_g = recons_loss + quantization_loss + adv_weight * generator_loss
    loss_g.backward()
    optimizer_g.step()

    # FIX: optimizer_d.zero_grad(set_to_none=True)
    logits_fake = discriminator(reconstruction.contiguous().detach())[-1]
    loss_d_fake = adv_loss(logits_fake, target_is_real=False)
    logits_real = discriminator(images.contiguous().detach())[-1]
    loss_d_real = adv_loss(logits_real, target_is_real=True)
    discriminator_loss = (loss_d_fake + loss_d_real) * 0.5
    loss_d = adv_weight * discriminator_loss
    loss_d.backward()
    optimizer_d.step()
_gb.done(model, discriminator)
