"""Lightning accumulate_grad_batches: the epoch's final partial window is divided by the full accumulation count.

source: Lightning-AI/pytorch-lightning#19987 (https://github.com/Lightning-AI/pytorch-lightning/issues/19987), "Handle gradient accumulations at the end of epoch differently": "update gradients incorrectly because the gradients are scaled by accumulate_grad_batches instead of the actual number of accumulations"
family: underscaled-window
shape: Trainer(accumulate_grad_batches=4) over an epoch of 10 batches: Lightning divides every training_step loss by 4 and steps on the last batch, so the last window of 2 is divided by 4
numeric: the epoch's last update is half the mean gradient of its window
watch: GG111
lint: out: Lightning divides the loss inside the framework; the user's code has no division to check
bug-step: 3
"""
import lightning as L
import torch
import torch.nn.functional as F

import _gb


class SimpleModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


_gb.setup()
model = SimpleModel()
_gb.start(model)
X, y = torch.randn(40, 12), torch.randint(0, 3, (40,))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=4)
callbacks = []
# FIX: from gradguard.integrations.lightning import ExactAccumulation
# FIX: callbacks = [ExactAccumulation()]
trainer = L.Trainer(max_epochs=1, accumulate_grad_batches=4, callbacks=callbacks, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    accelerator="cpu", devices=1)
trainer.fit(model, loader)
_gb.done(model)
