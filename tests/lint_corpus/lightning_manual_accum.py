"""Lightning manual optimization with accumulation (the Lightning docs' example)."""
import lightning.pytorch as pl
import torch
from torch import nn


class AccumModel(pl.LightningModule):
    def __init__(self, n_accum=4):
        super().__init__()
        self.automatic_optimization = False
        self.n_accum = n_accum
        self.net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        scheduler = self.lr_schedulers()
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        loss = loss / self.n_accum
        self.manual_backward(loss)
        if (batch_idx + 1) % self.n_accum == 0:
            opt.step()
            opt.zero_grad()
            scheduler.step()

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)]
