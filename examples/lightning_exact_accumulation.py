"""Exact gradient accumulation in PyTorch Lightning: the README's Lightning example, as it runs.

Ten micro-batches of 3 to 8 items, four per optimizer step: windows of 4, 4
and a final 2. Lightning alone divides every micro-batch's mean by 4, so its
micro-batches weigh alike whatever their sizes and the final window of 2 is
half as strong; with ExactAccumulation each step uses the full-batch mean of
its window. Run: python examples/lightning_exact_accumulation.py
"""

import lightning.pytorch as L
import torch
from gradguard.integrations.lightning import ExactAccumulation, Watch


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)  # the micro-batch's mean, as usual

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


batches = [(torch.randn(n, 3), torch.randn(n, 1)) for n in (3, 8, 5, 6, 4, 7, 3, 8, 5, 6)]
exact = ExactAccumulation()  # weights each micro-batch by its size (count_fn=... for tokens)
trainer = L.Trainer(max_epochs=2, accumulate_grad_batches=4, gradient_clip_val=1.0,
                    callbacks=[exact, Watch(mode="raise")], logger=False, enable_checkpointing=False)
trainer.fit(Regression(), torch.utils.data.DataLoader(batches, batch_size=None))
print(exact.loss)  # the exact mean loss of the last window (logged as window_loss where Lightning logs)
