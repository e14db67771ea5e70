"""nano-world-model: clip_grad_norm_ is called inside the LightningModule's training_step, before Lightning runs backward, so it clips nothing of the gradient the step uses.

source: simchowitzlabpublic/nano-world-model#22 (https://github.com/simchowitzlabpublic/nano-world-model/pull/22), "Clip gradients in configure_gradient_clipping instead of training_step" (merged): "The clip call (clip_grad_norm_) was inside training_step, before .backward() runs. Lightning calls training_step --> backward() --> clip --> optimizer.step(), so at the point this ran, p.grad was either None or leftover from the previous step, not the gradient about to be used. With gradient_accumulation: 1 (the default config), clipping did nothing ... Moved the clip into configure_gradient_clipping, which Lightning runs after backward"
family: clip-misplaced
shape: class WorldModel(L.LightningModule): def training_step(self, batch, batch_idx): loss = self.compute_loss(batch); grad_norm = clip_grad_norm_(self.parameters(), self.gradient_clip_norm); self.log(...); return loss. Fixed: def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None): clip_grad_norm_(self.parameters(), self.gradient_clip_norm). Trainer(accumulate_grad_batches=1) as the default config, AdamW
numeric: the configured clip never applies: every step uses the unclipped gradient
watch: GG116
lint: GG116
bug-step: 1
"""
import lightning as L
import torch
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_

import _gb


class WorldModel(L.LightningModule):
    def __init__(self, gradient_clip_norm=1.0):
        super().__init__()
        self.gradient_clip_norm = gradient_clip_norm
        self.encoder = torch.nn.Sequential(torch.nn.Linear(10, 64), torch.nn.ReLU())
        self.dynamics = torch.nn.Linear(64 + 2, 10)

    def compute_loss(self, batch):
        obs, action, next_obs = batch
        pred = self.dynamics(torch.cat([self.encoder(obs), action], dim=-1))
        return F.mse_loss(pred, next_obs)

    def training_step(self, batch, batch_idx):
        loss = self.compute_loss(batch)
        grad_norm = clip_grad_norm_(self.parameters(), self.gradient_clip_norm)  # BUG
        return loss

    # FIX: def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
    # FIX:     clip_grad_norm_(self.parameters(), self.gradient_clip_norm)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


_gb.setup()
model = WorldModel()
_gb.start(model)
obs, action = 5 * torch.randn(48, 10), torch.randn(48, 2)
next_obs = 5 * torch.roll(obs, 1, dims=1) + action.sum(dim=1, keepdim=True)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(obs, action, next_obs), batch_size=8)
trainer = L.Trainer(max_epochs=2, accumulate_grad_batches=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
trainer.fit(model, loader)
_gb.done(model)
