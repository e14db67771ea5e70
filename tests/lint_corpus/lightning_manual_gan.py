"""Lightning manual optimization with two optimizers (a GAN), toggling each one."""
import lightning.pytorch as pl
import torch
from torch import nn


class GAN(pl.LightningModule):
    def __init__(self, latent_dim=8):
        super().__init__()
        self.automatic_optimization = False
        self.latent_dim = latent_dim
        self.generator = nn.Sequential(nn.Linear(latent_dim, 32), nn.ReLU(), nn.Linear(32, 2))
        self.discriminator = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        real = batch
        g_opt, d_opt = self.optimizers()
        z = torch.randn(real.size(0), self.latent_dim, device=self.device)
        fake = self.generator(z)

        self.toggle_optimizer(g_opt)
        g_loss = nn.functional.binary_cross_entropy_with_logits(
            self.discriminator(fake), torch.ones(real.size(0), 1, device=self.device)
        )
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()
        self.untoggle_optimizer(g_opt)

        self.toggle_optimizer(d_opt)
        real_loss = nn.functional.binary_cross_entropy_with_logits(
            self.discriminator(real), torch.ones(real.size(0), 1, device=self.device)
        )
        fake_loss = nn.functional.binary_cross_entropy_with_logits(
            self.discriminator(fake.detach()), torch.zeros(real.size(0), 1, device=self.device)
        )
        d_loss = (real_loss + fake_loss) / 2
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        d_opt.step()
        self.untoggle_optimizer(d_opt)
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

    def configure_optimizers(self):
        g_opt = torch.optim.Adam(self.generator.parameters(), lr=2e-4)
        d_opt = torch.optim.Adam(self.discriminator.parameters(), lr=2e-4)
        return g_opt, d_opt
