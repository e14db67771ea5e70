"""yolov8_Distillation feature loss: the distillation loss class builds 1x1 alignment convolutions that map the student's feature maps to the teacher's channel counts, but only the student's parameters are given to the optimizer, so the alignment convolutions stay at their random initialisation while their gradients pile up in `.grad` (the student's `zero_grad()` never clears them).

source: huangzongmou/yolov8_Distillation#5 (https://github.com/huangzongmou/yolov8_Distillation/issues/5), "关于trainer代码中的一些问题": "在Feature_loss里面用于对齐的1x1卷积，我觉得应该是要加入到反向传播的过程中吧，但是这里好像只是用了一个随机初始化的卷积，并没有在推理过程中更新" and "loss类里面的参数没有加入到优化器中进行反向传播和更新，导致结果不正确" (the loss class's parameters are not added to the optimizer). The maintainer (huangzongmou) answered the other point of the issue (the teacher runs under torch.no_grad) and "这个我先看看" (I'll look at this); no fix was seen. The trainer was not read: the loss is an MSE between the aligned student features and the teacher's, the detector is reduced to a two-stage MLP student with a classification head, the teacher to a frozen MLP. The twin adds the loss module's parameters to the optimizer, what the issue asks
family: orphan
shape: SGD(lr=0.01, momentum=0.9) on the student; feature loss weight 1.0 over 2 stages; 6 steps on batches of 16
numeric: the alignment convolutions never move (the twin trains them), and their .grad sums every step's gradient
watch: GG106
lint: GG106
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class FeatureLoss(torch.nn.Module):
    def __init__(self, channels_s, channels_t):
        super().__init__()
        self.align = torch.nn.ModuleList(torch.nn.Conv2d(cs, ct, 1) for cs, ct in zip(channels_s, channels_t))

    def forward(self, feats_s, feats_t):
        return sum(F.mse_loss(a(fs), ft) for a, fs, ft in zip(self.align, feats_s, feats_t))


class Net(torch.nn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        self.stage1 = torch.nn.Conv2d(3, c1, 3, padding=1)
        self.stage2 = torch.nn.Conv2d(c1, c2, 3, padding=1)
        self.head = torch.nn.Linear(c2, 4)

    def forward(self, x):
        f1 = torch.relu(self.stage1(x))
        f2 = torch.relu(self.stage2(f1))
        return self.head(f2.mean((2, 3))), [f1, f2]


_gb.setup()
teacher = Net(16, 24).requires_grad_(False)
student = Net(8, 12)
distill = FeatureLoss([8, 12], [16, 24])
_gb.start(student, distill)
optimizer = torch.optim.SGD(student.parameters(), lr=0.01, momentum=0.9)  # BUG
# FIX: optimizer = torch.optim.SGD(list(student.parameters()) + list(distill.parameters()), lr=0.01, momentum=0.9)
for step in range(6):
    img, labels = torch.randn(16, 3, 8, 8), torch.randint(0, 4, (16,))
    with torch.no_grad():
        _, feats_t = teacher(img)
    logits, feats_s = student(img)
    loss = F.cross_entropy(logits, labels) + 1.0 * distill(feats_s, feats_t)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(student, distill)
