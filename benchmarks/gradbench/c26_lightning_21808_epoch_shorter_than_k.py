"""Lightning steps on the last batch of every epoch, so an epoch shorter than accumulate_grad_batches never accumulates fully.

source: Lightning-AI/pytorch-lightning#21808 (https://github.com/Lightning-AI/pytorch-lightning/issues/21808), "`accumulate_grad_batches` is silently ignored when epoch length < `accumulate_grad_batches`, because Lightning always steps on the last batch"
family: underscaled-window
shape: Trainer(accumulate_grad_batches=8) with 3 batches per epoch: _should_accumulate() is False on the epoch's final batch, so each epoch steps once on 3 micro-batches, each divided by 8
numeric: every update is 3/8 of the mean gradient of its 3 batches, and there are 8/3 times more updates than configured
watch: GG111
lint: out: Lightning divides the loss inside the framework; the user's code has no division to check
bug-step: 1
"""
import lightning as L
import torch
import torch.nn.functional as F

import _gb


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(6, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


_gb.setup()
model = Model()
_gb.start(model)
dataset = torch.utils.data.TensorDataset(torch.randn(12, 6), torch.randn(12, 2))
loader = torch.utils.data.DataLoader(dataset, batch_size=4)
callbacks = []
# FIX: from gradguard.integrations.lightning import ExactAccumulation
# FIX: callbacks = [ExactAccumulation()]
trainer = L.Trainer(max_epochs=2, accumulate_grad_batches=8, callbacks=callbacks, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    accelerator="cpu", devices=1)
trainer.fit(model, loader)
_gb.done(model)
