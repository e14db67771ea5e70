"""RF-DETR's Lightning module: with `grad_accum_steps > 1`, `training_step` returns `loss / accumulate_grad_batches` (assuming Lightning accumulates full-scale gradients), but Lightning's automatic optimization divides the returned loss by `accumulate_grad_batches` again before backward, so a window of N micro-batches yields 1/N of the mean gradient.

source: roboflow/rf-detr#1503 (https://github.com/roboflow/rf-detr/issues/1503), "Gradient accumulation divides the loss by accumulate_grad_batches twice (detection/segmentation)" (closed): "`RFDETRModelModule.training_step` ... returns `loss / accumulate_grad_batches` on the automatic-optimization path, with a comment saying "PTL accumulates full-scale gradients by default". Lightning does not: `ClosureResult.from_training_step_output` divides the returned loss by `trainer.accumulate_grad_batches` before `backward()` ... The two divisions compound." module_model.py was not read beyond the issue; the DETR model and criterion are reduced to an MLP with a cross-entropy loss, run with the real Lightning (CPU, accumulate_grad_batches=4). The twin returns the undivided loss
family: overscaled
shape: Lightning Trainer(accumulate_grad_batches=4), SGD(lr=0.1), one epoch of 8 batches of 4
numeric: each step's gradient is 1/4 of the window's mean
watch: GG113
lint: out: Lightning divides the returned loss inside the framework; which division is the second is decided by the Trainer's configuration
bug-step: 1
"""
import lightning as L
import torch
import torch.nn.functional as F

import _gb


class ModelModule(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        return loss / self.trainer.accumulate_grad_batches  # BUG
        # FIX: return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


_gb.setup()
module = ModelModule()
_gb.start(module)
X, y = torch.randn(32, 12), torch.randint(0, 3, (32,))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=4)
trainer = L.Trainer(max_epochs=1, accumulate_grad_batches=4, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
trainer.fit(module, loader)
_gb.done(module)
