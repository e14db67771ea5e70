"""Lightning manual-optimization docs, gradient accumulation example: the loss of each of the N accumulated batches is backpropagated undivided, so every step applies the sum of N batch means, N times the window's mean.

source: Lightning-AI/pytorch-lightning#17957 (https://github.com/Lightning-AI/pytorch-lightning/issues/17957), "Documentation should be updated to reflect loss scaling for manual optimization + gradient accumulation" (labels docs, optimization), from #12811 ("Because the gradients are accumulated n times, we need to take the average and divide by n ... this is not done by the example. I think the right usage is loss = self.compute_loss(batch) / n"). awaelchli (maintainer): "Explicitly dividing by N in that example should do the trick"; fixed by Lightning-AI/pytorch-lightning#17975 (merged, "Added divide by N for losses in the gradient accumulation example"). The example as #12811 quotes it: opt = self.optimizers(); loss = self.compute_loss(batch); self.manual_backward(loss); if (batch_idx + 1) % N == 0: opt.step(); opt.zero_grad(). The twin divides by N as the merged docs do
family: unscaled-window
shape: LightningModule with automatic_optimization = False and the example's training_step; compute_loss a mean-reduced MSE; N = 4, 8 batches per epoch, 2 epochs, SGD
numeric: every step applies 4 times the window's mean gradient
watch: GG104
lint: GG104
bug-step: 1
"""
import lightning as L
import torch
import torch.nn.functional as F

import _gb

N = 4


class LitModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def compute_loss(self, batch):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.compute_loss(batch)  # BUG
        # FIX: loss = self.compute_loss(batch) / N
        self.manual_backward(loss)
        # accumulate gradients of N batches
        if (batch_idx + 1) % N == 0:
            opt.step()
            opt.zero_grad()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


_gb.setup()
model = LitModel()
_gb.start(model)
x = torch.randn(64, 6)
y = x[:, :2].sum(1, keepdim=True)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accelerator="cpu", devices=1)
trainer.fit(model, loader)
_gb.done(model)
