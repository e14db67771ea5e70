"""pytorch-forecasting BaseModel: each training step's log dictionary, holding the live loss, is appended to `training_step_outputs` for the epoch-end hook, so every batch's autograd graph stays alive until the epoch ends.

source: sktime/pytorch-forecasting#1924 (https://github.com/sktime/pytorch-forecasting/pull/1924), "[BUG] fixed memory leak in BaseModel by detach some tensor" (merged; issues #1369, #1461): "Detached tensors in the log dictionary before appending them to the training/validation/testing_step_outputs lists. This fixes a memory leak caused by retaining the computation graph for every batch throughout an entire epoch. Detached the loss tensor within the step() method before logging." The forecasting network is reduced to an MLP; the pre-fix lines were not read, the shape is the one the PR describes (log = {"loss": loss, "n_samples": ...} appended, the list cleared at epoch end). Memory is measured at the end of the run's last training batch, before the epoch-end hook clears the list. The twin appends a copy of the log with its tensors detached (the loss returned to Lightning stays live)
family: graph-logging
shape: class BaseModel(LightningModule): def training_step(self, batch, batch_idx): x, y = batch; log, out = self.step(x, y, batch_idx); self.training_step_outputs.append(log); return log. def step(...): loss = self.loss(prediction, y); return {"loss": loss, "n_samples": x.size(0)}, prediction. def on_train_epoch_end(self): self.training_step_outputs.clear(). Adam, 8 batches per epoch, 2 epochs
numeric: the graphs of all the epoch's batches are alive at its last batch
watch: out: the kept log holds graph nodes, not gradient; the watch follows .grad
lint: out: the loss is kept by a dict stored in a list, not an arithmetic sum (the rule looks for sums)
bug-step: end
"""
import lightning as L
import torch
import torch.nn.functional as F

import _gb


class BaseModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.network = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
        self.training_step_outputs = []

    def step(self, x, y, batch_idx):
        prediction = self.network(x)
        loss = F.mse_loss(prediction, y)
        log = {"loss": loss, "n_samples": x.size(0)}
        return log, prediction

    def training_step(self, batch, batch_idx):
        x, y = batch
        log, out = self.step(x, y, batch_idx)
        self.training_step_outputs.append(log)  # BUG
        # FIX: self.training_step_outputs.append({k: v.detach() if torch.is_tensor(v) else v for k, v in log.items()})
        return log

    def on_train_epoch_end(self):
        self.training_step_outputs.clear()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class MeasureAtLastBatch(L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.current_epoch == trainer.max_epochs - 1 and batch_idx == trainer.num_training_batches - 1:
            _gb.done(pl_module, kept=[d["loss"] for d in pl_module.training_step_outputs])


_gb.setup()
model = BaseModel()
_gb.start(model)
x = torch.randn(64, 12)
y = torch.stack([x[:, :4].sum(1), x[:, 4:8].sum(1), x[:, 8:].sum(1)], 1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accelerator="cpu", devices=1, callbacks=[MeasureAtLastBatch()])
trainer.fit(model, loader)
