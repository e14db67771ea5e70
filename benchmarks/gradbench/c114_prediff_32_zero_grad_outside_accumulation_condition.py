"""PreDiff VAE training (Lightning manual optimization): `opt.zero_grad()` sits outside the `if (batch_idx + 1) % accumulate_grad_batches == 0` block, so every micro-batch's gradients are cleared before the window's step uses them.

source: gaozhihan/PreDiff#32 (https://github.com/gaozhihan/PreDiff/issues/32), "Timing to call .zero_grad()": "you call .zero_grad() outside the IF condition in your VAE training script (line 454 & 467). Shouldn't we call it after .step() in IF condition? Otherwise the accumulated gradient in computation graphs will be erased." The author: "Thank you very much for identifying this bug. It has been fixed in #33" (gaozhihan/PreDiff#33, labelled bug, merged). Code read after the fix (scripts/vae/train_vae_sevirlr.py, training_step): aeloss /= self.accumulate_grad_batches; self.manual_backward(aeloss); if (batch_idx + 1) % self.accumulate_grad_batches == 0: self.clip_gradients(g_opt, ...); g_opt.step(); g_sch.step(); g_opt.zero_grad(); the same for the discriminator with discloss. The VAE and its LPIPS/discriminator loss are reduced to a small autoencoder, a reconstruction + KL loss and a hinge loss on detached reconstructions (the adversarial weight is 0 before disc_start, as in taming's loss); schedulers left out
family: misplaced-clear
shape: LightningModule with automatic_optimization = False; training_step: g_opt, d_opt = self.optimizers(); pred, posterior = self(x); aeloss = loss(...) / self.accumulate_grad_batches; self.manual_backward(aeloss); if (batch_idx + 1) % self.accumulate_grad_batches == 0: self.clip_gradients(g_opt, gradient_clip_val=1.0, gradient_clip_algorithm="norm"); g_opt.step(); g_opt.zero_grad() (bug: outside the if); the same for d_opt and discloss. accumulate_grad_batches = 2, 8 batches per epoch, 2 epochs, Adam
numeric: every step of both optimizers uses only the window's last micro-batch, divided by 2: half of one micro-batch's gradient instead of the window's mean
watch: GG102
lint: GG102
bug-step: 1
"""
import lightning as L
import torch
import torch.nn.functional as F

import _gb


class VAESEVIRLRPLModule(L.LightningModule):
    def __init__(self, accumulate_grad_batches=2, gradient_clip_val=1.0):
        super().__init__()
        self.automatic_optimization = False
        self.accumulate_grad_batches, self.gradient_clip_val = accumulate_grad_batches, gradient_clip_val
        self.encoder = torch.nn.Linear(12, 8)  # mean and log-variance of a 4-d latent
        self.decoder = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 12))
        self.discriminator = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1))

    def forward(self, x):
        mean, logvar = self.encoder(x).chunk(2, dim=-1)
        z = mean + torch.exp(0.5 * logvar) * torch.randn_like(mean)
        return self.decoder(z), (mean, logvar)

    def training_step(self, batch, batch_idx):
        g_opt, d_opt = self.optimizers()
        (target,) = batch
        pred, (mean, logvar) = self(target)
        kl = -0.5 * torch.mean(1 + logvar - mean.pow(2) - logvar.exp())
        aeloss = F.l1_loss(pred, target) + 1e-3 * kl
        aeloss /= self.accumulate_grad_batches
        self.manual_backward(aeloss)
        if (batch_idx + 1) % self.accumulate_grad_batches == 0:
            self.clip_gradients(g_opt, gradient_clip_val=self.gradient_clip_val, gradient_clip_algorithm="norm")
            g_opt.step()
            # FIX: g_opt.zero_grad()
        g_opt.zero_grad()  # BUG

        logits_real, logits_fake = self.discriminator(target), self.discriminator(pred.detach())
        discloss = 0.5 * (F.relu(1.0 - logits_real).mean() + F.relu(1.0 + logits_fake).mean())
        discloss /= self.accumulate_grad_batches
        self.manual_backward(discloss)
        if (batch_idx + 1) % self.accumulate_grad_batches == 0:
            self.clip_gradients(d_opt, gradient_clip_val=self.gradient_clip_val, gradient_clip_algorithm="norm")
            d_opt.step()
            # FIX: d_opt.zero_grad()
        d_opt.zero_grad()  # BUG

    def configure_optimizers(self):
        g_params = list(self.encoder.parameters()) + list(self.decoder.parameters())
        return (torch.optim.Adam(g_params, lr=1e-3, betas=(0.5, 0.9)),
                torch.optim.Adam(self.discriminator.parameters(), lr=1e-3, betas=(0.5, 0.9)))


_gb.setup()
model = VAESEVIRLRPLModule()
_gb.start(model)
data = torch.randn(64, 12)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_size=8)
trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accelerator="cpu", devices=1)
trainer.fit(model, loader)
_gb.done(model)
