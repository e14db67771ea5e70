"""icefall GRID lip-reading recipe (VSR conformer_ctc2/train.py): `scaler.unscale_(optimizer)` is commented out before `clip_grad_norm_`, so the clip at max_norm=1.0 applies to gradients still multiplied by the GradScaler's scale.

source: k2-fsa/icefall#2081 (https://github.com/k2-fsa/icefall/pull/2081), "Add VSR (lip reading) recipe using GRID dataset" (merged), review thread on egs/grid/VSR/conformer_ctc2/train.py:718 by coderabbitai[bot] ("Potential issue, Major"), quoting: # scaler.unscale_(optimizer); grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0  # Common value for Conformers); scheduler.step_batch(params.batch_idx_train); scaler.step(optimizer); scaler.update(); optimizer.zero_grad() — "the recommended order ... is to call scaler.unscale_(optimizer) before torch.nn.utils.clip_grad_norm_". Unconfirmed: an automated review finding; no reply on record. The conformer and its CTC loss are reduced to an MLP with a cross-entropy loss, Eden to a constant LambdaLR, the optimizer to Adam; the GradScaler is the CPU one (enabled, as with AMP). The twin uncomments the unscale
family: clip-before-unscale
shape: for batch_idx, batch in enumerate(train_dl): params.batch_idx_train += 1; with torch.autocast("cpu", enabled=params.use_fp16): loss = compute_loss(model, batch); scaler.scale(loss).backward(); # scaler.unscale_(optimizer); grad_norm = clip_grad_norm_(model.parameters(), max_norm=1.0); scheduler.step_batch(params.batch_idx_train); scaler.step(optimizer); scaler.update(); optimizer.zero_grad(). 8 batches
numeric: the clip threshold 1.0 applies to the scaled norm: every update uses a gradient about 65536x smaller than the clipped true gradient before Adam's normalisation
watch: GG112
lint: GG112
bug-step: 1
"""
import argparse

import torch
import torch.nn.functional as F

import _gb


class Eden(torch.optim.lr_scheduler.LambdaLR):
    def __init__(self, optimizer):
        super().__init__(optimizer, lambda step: 1.0)

    def step_batch(self, batch):
        self.step()


def compute_loss(model, batch):
    feature, tokens = batch
    return F.cross_entropy(model(feature), tokens)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 6))
_gb.start(model)
params = argparse.Namespace(batch_idx_train=0, use_fp16=False)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
scheduler = Eden(optimizer)
scaler = torch.amp.GradScaler("cpu", init_scale=65536.0)
train_dl = [(f, f[:, :6].argmax(1)) for f in (3 * torch.randn(16, 20) for _ in range(8))]
for batch_idx, batch in enumerate(train_dl):
    params.batch_idx_train += 1
    with torch.autocast("cpu", enabled=params.use_fp16):
        loss = compute_loss(model, batch)
    scaler.scale(loss).backward()
    # scaler.unscale_(optimizer)  # BUG
    # FIX: scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scheduler.step_batch(params.batch_idx_train)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
_gb.done(model)
