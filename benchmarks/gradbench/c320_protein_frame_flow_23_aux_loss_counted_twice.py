"""protein-frame-flow's training step: `model_step` already adds the auxiliary loss into `se3_vf_loss`, and `training_step` adds `total_losses['auxiliary_loss']` to the configured loss (`se3_vf_loss` by default) again, so the auxiliary term is counted twice in the loss that is backpropagated and its gradient enters every step doubled.

source: microsoft/protein-frame-flow#23 (https://github.com/microsoft/protein-frame-flow/issues/23), "Auxiliary loss is counted twice in the loss" (closed): "In `model_step`, we have `se3_vf_loss += auxiliary_loss`. Yet in `training_step`, we also have `train_loss = (total_losses[self._exp_cfg.training.loss] + total_losses['auxiliary_loss'])`. The default training loss is `se3_vf_loss` so in this case, auxiliary loss is being counted twice"; a maintainer: "I think it may be a bug. We removed and trained and attained very similar results"; another: "This has been fixed." The flow model is reduced to an MLP predicting translation and rotation vector fields from noised frames, the auxiliary loss a backbone-position loss on the predicted translations weighted by aux_loss_weight. The twin adds the auxiliary loss once
family: loss-term-counted-twice
shape: Adam(lr=1e-4), 6 steps on batches of 4 proteins of 8 residues (translation 3 + rotation 3 per residue)
numeric: every step's gradient holds the auxiliary term's gradient twice
watch: out: which terms the loss sums, and how often, is the loss's definition; one backward per step, applied once and cleared
lint: out: a term added to a loss twice is the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch

import _gb

aux_loss_weight = 1.0
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6 + 1, 64), torch.nn.SiLU(), torch.nn.Linear(64, 6))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)


def model_step(frames_1):
    t = torch.rand(frames_1.shape[0], 1, 1)
    frames_0 = torch.randn_like(frames_1)
    frames_t = (1 - t) * frames_0 + t * frames_1
    pred = model(torch.cat([frames_t, t.expand(-1, frames_t.shape[1], 1)], -1))
    trans_loss = (pred[..., :3] - frames_1[..., :3]).pow(2).mean()
    rots_vf_loss = (pred[..., 3:] - (frames_1[..., 3:] - frames_0[..., 3:])).pow(2).mean()
    se3_vf_loss = trans_loss + rots_vf_loss
    bb_pos = pred[..., :3].cumsum(1)
    auxiliary_loss = aux_loss_weight * (bb_pos - frames_1[..., :3].cumsum(1)).pow(2).mean()
    se3_vf_loss += auxiliary_loss
    return {"se3_vf_loss": se3_vf_loss, "auxiliary_loss": auxiliary_loss}


for step in range(6):
    total_losses = model_step(torch.randn(4, 8, 6))
    train_loss = total_losses["se3_vf_loss"] + total_losses["auxiliary_loss"]  # BUG
    # FIX: train_loss = total_losses["se3_vf_loss"]
    optimizer.zero_grad()
    train_loss.backward()
    optimizer.step()
_gb.done(model)
