"""Lightning accumulate_grad_batches over padded variable-length sequences: a mean of micro-batch means.

source: Lightning-AI/pytorch-lightning#20350 (https://github.com/Lightning-AI/pytorch-lightning/issues/20350), "Gradient accumulation calcluation may be incorrect": worse results with accumulation than with more devices "when using uneven length (and padded) samples"
family: mean-of-means
shape: training_step returns cross-entropy averaged over the batch's non-padding tokens; Trainer(accumulate_grad_batches=4) divides each by 4
numeric: tokens of short micro-batches weigh more than tokens of long ones: the step's gradient is not the window's token mean
watch: GG105
lint: out: the token counts of the micro-batches are data, unknown before run time
bug-step: 1
"""
import lightning as L
import torch
import torch.nn.functional as F

import _gb


class TokenModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Linear(8, 16)

    def training_step(self, batch, batch_idx):
        ids, labels = batch
        logits = self.head(torch.tanh(self.embed(ids)))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


_gb.setup()
model = TokenModel()
_gb.start(model)
ids = torch.randint(0, 16, (8, 10))
labels = ids.clone()
for row, n in enumerate([10, 1, 2, 10, 3, 10, 1, 9]):
    labels[row, n:] = -100
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids, labels), batch_size=1)
callbacks = []
# FIX: from gradguard.integrations.lightning import ExactAccumulation
# FIX: callbacks = [ExactAccumulation(count_fn=lambda b: int((b[1] != -100).sum()))]
trainer = L.Trainer(max_epochs=1, accumulate_grad_batches=4, callbacks=callbacks, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    accelerator="cpu", devices=1)
trainer.fit(model, loader)
_gb.done(model)
