"""Lightning automatic optimization: training_step returns the loss and the Trainer does the rest."""
import lightning.pytorch as pl
import torch
from torch import nn


class LitClassifier(pl.LightningModule):
    def __init__(self, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.backbone = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.backbone(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("val_loss", loss)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main(train_loader, val_loader):
    trainer = pl.Trainer(max_epochs=3, accumulate_grad_batches=4, gradient_clip_val=1.0)
    trainer.fit(LitClassifier(), train_loader, val_loader)
