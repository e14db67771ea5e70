"""Correct: a Lightning module, automatic and manual optimization (no finding expected)."""
import lightning as L
import torch
import torch.nn.functional as F


class LitModel(L.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self.net(x), y) / 4
        self.manual_backward(loss)
        if (batch_idx + 1) % 4 == 0:
            opt.step()
            opt.zero_grad()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class AutoModel(L.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def on_before_optimizer_step(self, optimizer):
        for p in self.parameters():
            if p.grad is not None:
                p.grad.zero_()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())
