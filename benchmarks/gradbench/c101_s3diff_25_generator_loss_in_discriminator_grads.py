"""S3Diff train_s3diff.py: the generator's adversarial loss is backpropagated through the discriminator, and the discriminator's step then uses that gradient as well as its own.

source: ArcticHare105/S3Diff#25 (https://github.com/ArcticHare105/S3Diff/issues/25), "Some wrong in gan loss": "I found the loss_g will product the grad to discriminator" (pointing at src/train_s3diff.py, lossG.backward); a second user: "you should add this" (the discriminator's gradients cleared before its own loss). Code read: src/train_s3diff.py: lossG = net_disc(x_tgt_pred, for_G=True).mean() * args.lambda_gan; accelerator.backward(lossG); optimizer.step(); optimizer.zero_grad() (the generator's optimizer only); then lossD_real = net_disc(x_tgt.detach(), for_real=True).mean() * args.lambda_gan; accelerator.backward(lossD_real.mean()); optimizer_disc.step(); optimizer_disc.zero_grad(). The issue is open; the twin clears the discriminator's optimizer before its real-image loss, as the second user proposes
family: gan-stale
shape: for step, batch in enumerate(dl_train): with accelerator.accumulate(net_sr, net_disc): reconstruction loss: backward, clip, optimizer.step(), optimizer.zero_grad(); generator loss through net_disc: accelerator.backward(lossG); optimizer.step(); optimizer.zero_grad(); discriminator real: accelerator.backward(lossD_real); clip; optimizer_disc.step(); optimizer_disc.zero_grad(); fake: accelerator.backward(lossD_fake); optimizer_disc.step(); optimizer_disc.zero_grad(). One CPU process, gradient_accumulation_steps = 1, AdamW for both
numeric: every real-image discriminator step also applies the generator loss's gradient with respect to the discriminator (the opposite of its own objective)
watch: out: the leaked gradient was never applied by an earlier step (not stale); the watch has no rule for a gradient from another model's loss
lint: out: clearing after each step is the correct pattern in general; telling which loss should reach the discriminator needs the data flow
bug-step: 1
"""
import torch
import torch.nn.functional as F
from accelerate import Accelerator

import _gb


class Discriminator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1))

    def forward(self, x, for_G=False, for_real=False):
        logits = self.net(x)
        target = torch.ones_like(logits) if (for_G or for_real) else torch.zeros_like(logits)
        return F.binary_cross_entropy_with_logits(logits, target, reduction="none")


_gb.setup()
accelerator = Accelerator(cpu=True, gradient_accumulation_steps=1)
net_sr = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
net_disc = Discriminator()
_gb.start(net_sr, net_disc)
optimizer = torch.optim.AdamW(net_sr.parameters(), lr=1e-3)
optimizer_disc = torch.optim.AdamW(net_disc.parameters(), lr=1e-3)
dl_train = [(x + 0.3 * torch.randn(4, 8), x) for x in (torch.randn(4, 8) for _ in range(6))]
net_sr, net_disc, optimizer, optimizer_disc = accelerator.prepare(net_sr, net_disc, optimizer, optimizer_disc)
lambda_l2, lambda_gan, max_grad_norm = 1.0, 0.5, 1.0
for epoch in range(2):
    for step, (x_src, x_tgt) in enumerate(dl_train):
        with accelerator.accumulate(net_sr, net_disc):
            x_tgt_pred = net_sr(x_src)
            loss = F.mse_loss(x_tgt_pred, x_tgt) * lambda_l2
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(net_sr.parameters(), max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
            # generator loss: fool the discriminator
            x_tgt_pred = net_sr(x_src)
            lossG = net_disc(x_tgt_pred, for_G=True).mean() * lambda_gan
            accelerator.backward(lossG)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(net_sr.parameters(), max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
            # discriminator loss: fake image vs real image
            # FIX: optimizer_disc.zero_grad()
            lossD_real = net_disc(x_tgt.detach(), for_real=True).mean() * lambda_gan
            accelerator.backward(lossD_real.mean())
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(net_disc.parameters(), max_grad_norm)
            optimizer_disc.step()
            optimizer_disc.zero_grad()
            lossD_fake = net_disc(x_tgt_pred.detach(), for_real=False).mean() * lambda_gan
            accelerator.backward(lossD_fake.mean())
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(net_disc.parameters(), max_grad_norm)
            optimizer_disc.step()
            optimizer_disc.zero_grad()
_gb.done(accelerator.unwrap_model(net_sr), accelerator.unwrap_model(net_disc))
