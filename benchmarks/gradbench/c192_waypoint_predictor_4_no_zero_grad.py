"""waypoint-predictor training loop: each iteration computes the loss, calls `loss.backward()` and `optimizer.step()`, and never clears the gradients, so every step applies the sum of all the gradients computed so far.

source: wz0919/waypoint-predictor#4 (https://github.com/wz0919/waypoint-predictor/issues/4), "Is optimizer.zero_grad() intentionally omitted in training loop?": "I noticed that in your training loop, there doesn't seem to be a call to optimizer.zero_grad() (waypoint_predictor.py#L153-L155). Is this intentional? I was wondering if gradients are being cleared elsewhere, or if this might be an oversight." No answer from the maintainers was seen: the bug is unconfirmed. The script was not read beyond the lines the issue points to (loss.backward(); optimizer.step()): the predictor is reduced to an MLP that maps panoramic features to a 24-bin heatmap trained with a binary cross-entropy. The twin calls optimizer.zero_grad() before the backward pass
family: missing-clear
shape: AdamW(lr=1e-3); 6 iterations on batches of 16
numeric: from step 2 each step applies the running sum of all gradients
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
predictor = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 24))
_gb.start(predictor)
optimizer = torch.optim.AdamW(predictor.parameters(), lr=1e-3)
for it in range(6):
    features = torch.randn(16, 64)
    target = (torch.rand(16, 24) < 0.2).float()
    logits = predictor(features)
    loss = F.binary_cross_entropy_with_logits(logits, target)
    # FIX: optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(predictor)
