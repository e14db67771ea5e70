"""PyramidBox's train.py: the training loop computes the multibox losses and calls `optimizer.step()` without `loss.backward()`, so the detector is never trained.

source: Goingqs/PyramidBox#7 (https://github.com/Goingqs/PyramidBox/issues/7), the report that train.py has no loss.backward(); the author: "Sorry, I have fix it". The loop's order (zero_grad, forward, loss_l + loss_c, step) is taken from the report; the detector is reduced to an MLP with a box-regression head and a face/background head, the multibox loss to smooth-L1 plus cross-entropy; the optimizer is SGD with momentum and weight decay (the repository's settings were not read). The twin backpropagates before the step
family: missing-backward
shape: SGD(lr=1e-3, momentum 0.9, weight_decay 5e-4), 5 iterations of 8 images of 32 features with 4 anchors each
numeric: the bug never updates the model
watch: GG110
lint: out: a loss computed and never backpropagated is ordinary code; nothing connects it to the step that follows
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Detector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.base = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU())
        self.loc, self.conf = torch.nn.Linear(64, 4 * 4), torch.nn.Linear(64, 4 * 2)

    def forward(self, x):
        h = self.base(x)
        return self.loc(h).view(-1, 4, 4), self.conf(h).view(-1, 4, 2)


_gb.setup()
net = Detector()
_gb.start(net)
optimizer = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9, weight_decay=5e-4)
for iteration in range(5):
    images, boxes, labels = torch.randn(8, 32), torch.randn(8, 4, 4), torch.randint(0, 2, (8, 4))
    out_loc, out_conf = net(images)
    optimizer.zero_grad()
    loss_l = F.smooth_l1_loss(out_loc, boxes)
    loss_c = F.cross_entropy(out_conf.reshape(-1, 2), labels.reshape(-1))
    loss = loss_l + loss_c
    # FIX: loss.backward()
    optimizer.step()
_gb.done(net)
