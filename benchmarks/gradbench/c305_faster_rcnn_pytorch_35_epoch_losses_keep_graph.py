"""bubbliiiing's faster-rcnn-pytorch training loop: the epoch's running losses are summed from the loss tensors (`total_loss += total`, `rpn_loc_loss += rpn_loc`, ...) instead of their values, so every iteration's autograd graph stays referenced by the sums and memory keeps growing over the epoch.

source: bubbliiiing/faster-rcnn-pytorch#35 (https://github.com/bubbliiiing/faster-rcnn-pytorch/issues/35), "代码存在内存泄漏问题，建议进行优化" (closed): "loss累加的时候直接相加，而没有+=loss.item()，导致在某些时候资源没有得到释放，内存不断增加" (the losses are added directly, without += loss.item(), so resources are not released and memory keeps increasing), with the fix `total_loss += total.item()`, `rpn_loc_loss += rpn_loc.item()`, `rpn_cls_loss += rpn_cls.item()`, `roi_loc_loss += roi_loc.item()`, `roi_cls_loss += roi_cls.item()`. The detector is reduced to a shared backbone with an RPN head (location and objectness) and an ROI head (location and class), its five losses summed into total as train_step returns them. The twin sums .item() as the issue proposes
family: graph-logging
shape: SGD(lr=1e-3, momentum 0.9), 8 iterations of 4 images (64 features each)
numeric: the five running sums hold all 8 iterations' graphs at the end
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class FasterRCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())
        self.rpn_loc, self.rpn_score = torch.nn.Linear(64, 4), torch.nn.Linear(64, 2)
        self.roi_loc, self.roi_score = torch.nn.Linear(64, 4), torch.nn.Linear(64, 5)

    def train_step(self, imgs, rpn_loc_t, rpn_label, roi_loc_t, roi_label):
        f = self.backbone(imgs)
        rpn_loc = F.smooth_l1_loss(self.rpn_loc(f), rpn_loc_t)
        rpn_cls = F.cross_entropy(self.rpn_score(f), rpn_label)
        roi_loc = F.smooth_l1_loss(self.roi_loc(f), roi_loc_t)
        roi_cls = F.cross_entropy(self.roi_score(f), roi_label)
        total = rpn_loc + rpn_cls + roi_loc + roi_cls
        return total, rpn_loc, rpn_cls, roi_loc, roi_cls


_gb.setup()
net = FasterRCNN()
_gb.start(net)
optimizer = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
total_loss = rpn_loc_loss = rpn_cls_loss = roi_loc_loss = roi_cls_loss = 0
for iteration in range(8):
    batch = (torch.randn(4, 64), torch.randn(4, 4), torch.randint(0, 2, (4,)), torch.randn(4, 4),
             torch.randint(0, 5, (4,)))
    total, rpn_loc, rpn_cls, roi_loc, roi_cls = net.train_step(*batch)
    optimizer.zero_grad()
    total.backward()
    optimizer.step()
    total_loss += total  # BUG
    rpn_loc_loss += rpn_loc  # BUG
    rpn_cls_loss += rpn_cls  # BUG
    roi_loc_loss += roi_loc  # BUG
    roi_cls_loss += roi_cls  # BUG
    # FIX: total_loss += total.item()
    # FIX: rpn_loc_loss += rpn_loc.item()
    # FIX: rpn_cls_loss += rpn_cls.item()
    # FIX: roi_loc_loss += roi_loc.item()
    # FIX: roi_cls_loss += roi_cls.item()
_gb.done(net, kept=[t for t in (total_loss, rpn_loc_loss, rpn_cls_loss, roi_loc_loss, roi_cls_loss)
                    if torch.is_tensor(t)])
