"""Yet-Another-EfficientDet-Pytorch's training loop: when a batch's loss is zero or not finite the loop `continue`s without a backward pass, so that batch's autograd graph stays referenced by `loss`, `cls_loss` and `reg_loss` until the next iteration rebinds them (and after the loop when it is the last batch), which can run the GPU out of memory.

source: zylo117/Yet-Another-EfficientDet-Pytorch#544 (https://github.com/zylo117/Yet-Another-EfficientDet-Pytorch/issues/544), "found a bug in the code" (closed): "when the loss is zero or inf, you choose to skip the backward and continue; `if loss == 0 or not torch.isfinite(loss): continue` it may cause out of memory. You need to delet the graph before you start the next batch. `del loss,cls_loss,reg_loss`"; the maintainer: "You are right about the oom risks." train.py's loop is kept (zero_grad, the model's classification and regression losses, their means, the skip, backward, clip, step); the detector is reduced to a backbone with classification and regression heads whose losses are masked by the batch's annotations, so a batch without annotations has a loss of exactly 0, as the last batch here has. The twin deletes the losses before continuing, as the issue proposes
family: graph-logging
shape: AdamW(lr=1e-4), 6 batches of 4 images (64 features), the last one without annotations
numeric: the skipped batch's graph (with its saved activations) stays alive after training
watch: out: a skipped batch's graph holds saved tensors, not gradient; the watch follows .grad
lint: out: the graph is kept by names a continue leaves bound, not an arithmetic sum in the loop
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class EfficientDetBackbone(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.SiLU())
        self.classifier, self.regressor = torch.nn.Linear(128, 6), torch.nn.Linear(128, 4)

    def forward(self, imgs, annotations, has_objects):
        f = self.backbone(imgs)
        mask = has_objects.to(f.dtype)
        cls_loss = (F.cross_entropy(self.classifier(f), annotations[:, 0].long(), reduction="none") * mask)
        reg_loss = (F.smooth_l1_loss(self.regressor(f), annotations[:, 1:5], reduction="none").mean(1) * mask)
        return cls_loss, reg_loss


_gb.setup()
model = EfficientDetBackbone()
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for it in range(6):
    imgs = torch.randn(4, 64)
    annot = torch.cat([torch.randint(0, 6, (4, 1)).to(imgs.dtype), torch.randn(4, 4)], 1)
    has_objects = torch.full((4,), it < 5)
    optimizer.zero_grad()
    cls_loss, reg_loss = model(imgs, annot, has_objects)
    cls_loss, reg_loss = cls_loss.mean(), reg_loss.mean()
    loss = cls_loss + reg_loss
    if loss == 0 or not torch.isfinite(loss):
        # FIX: del loss, cls_loss, reg_loss
        continue
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    optimizer.step()
_gb.done(model, kept=[v for v in (globals().get("loss"), globals().get("cls_loss"), globals().get("reg_loss"))
                      if torch.is_tensor(v)])
