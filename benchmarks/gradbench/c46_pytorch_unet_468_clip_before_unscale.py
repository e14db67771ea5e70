"""Pytorch-UNet train.py: gradient clipping before the GradScaler unscales the gradients.

source: milesial/Pytorch-UNet#468 (https://github.com/milesial/Pytorch-UNet/issues/468), "Gradients are clipped before the unscaling" (train.py lines 114-115); fixed by milesial/Pytorch-UNet#470 "Unscale gradients before clipping"
family: clip-before-unscale
shape: optimizer.zero_grad(set_to_none=True); grad_scaler.scale(loss).backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clipping); grad_scaler.step(optimizer); grad_scaler.update()
numeric: the clip threshold (1.0) applies to the scaled norm: each RMSprop update uses a gradient about 65536x smaller than the clipped true gradient
watch: GG112
lint: GG112
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
grad_scaler = torch.amp.GradScaler("cpu")
gradient_clipping = 1.0
for epoch in range(2):
    for _ in range(3):
        images = torch.randn(4, 1, 8, 8)
        true_masks = (images > 0).long().squeeze(1)
        masks_pred = model(images)
        loss = F.cross_entropy(masks_pred, true_masks)
        optimizer.zero_grad(set_to_none=True)
        grad_scaler.scale(loss).backward()
        # FIX: grad_scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clipping)
        grad_scaler.step(optimizer)
        grad_scaler.update()
_gb.done(model)
