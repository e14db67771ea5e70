"""DINO (DETR with improved denoising anchors), `engine.py`'s `train_one_epoch`: the AMP branch clears the optimizer before scaling the loss, but the plain branch goes straight to `losses.backward()`, `clip_grad_norm_` and `optimizer.step()`, so without AMP the gradients are never cleared and every step applies the running sum of all earlier gradients (clipped to max_norm as a whole).

source: IDEA-Research/DINO#20 (https://github.com/IDEA-Research/DINO/issues/20), "There is no optimizer.zero_grad() in training without amp." A maintainer (SuperHenry2333): "Thank you for your reminder. We have fixed the bug. The bug does not affect the result much because the grads after clip_grad_norm_() will be very small compared with the grads before clip_grad_norm_()." engine.py was not read beyond the issue: the loop has the two branches the issue describes; the detector is reduced to an MLP with a classification and a box head, the Hungarian-matched loss to cross-entropy plus L1 on fixed targets; AdamW with clip_max_norm 0.1 as in DETR-style configs. The twin clears before backward in the plain branch, the maintainers' fix
family: missing-clear
shape: AdamW(lr=1e-4, weight_decay=1e-4), clip max_norm 0.1, amp off; 6 steps on batches of 8
numeric: the k-th step applies the clipped sum of the first k gradients
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class Detector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
        self.class_embed = torch.nn.Linear(32, 5)
        self.bbox_embed = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = self.backbone(x)
        return self.class_embed(h), self.bbox_embed(h).sigmoid()


_gb.setup()
amp = False
data = [(torch.randn(8, 16), torch.randint(0, 5, (8,)), torch.rand(8, 4)) for _ in range(6)]
model = Detector()
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)
max_norm = 0.1
for samples, labels, boxes in data:
    logits, pred_boxes = model(samples)
    losses = F.cross_entropy(logits, labels) + 5 * F.l1_loss(pred_boxes, boxes)
    if amp:
        optimizer.zero_grad()
        losses.backward()
        optimizer.step()
    else:
        # FIX: optimizer.zero_grad()
        losses.backward()
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
_gb.done(model)
