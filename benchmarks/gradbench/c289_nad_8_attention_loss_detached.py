"""NAD (neural attention distillation): the attention-transfer losses between the student's and the teacher's feature maps are detached before they are added to the classification loss, so they send no gradient to the student and the distillation that is the method's point does nothing.

source: bboylyg/NAD#8 (https://github.com/bboylyg/NAD/issues/8), the report that the AT loss is detached before backward so it "contributes no gradient"; the authors fixed it. The training step is written from the report: cross-entropy on the student's logits plus beta_i times the attention loss of three feature stages (attention map = normalized channel mean of |a|^p, p = 2), teacher frozen, betas 500/1000/1000 (the case's choice); WideResNets reduced to 3-stage MLPs. The twin keeps the attention losses attached
family: detached-loss
shape: SGD(lr=0.1, momentum 0.9), betas 500 1000 1000, 4 iterations of 16 samples
numeric: the bug's updates lack the attention terms' gradient
watch: out: a loss term that never reaches a parameter leaves no gradient to check; every gradient present is applied once and cleared
lint: GG203
scope-history: lint declared out when the case was written ("a detach inside a loss expression is the loss's definition, not the gradient buffer's handling"); re-declared GG203 after the rule was written from this family's cases (in-sample from then on)
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.s1 = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
        self.s2 = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU())
        self.s3 = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU())
        self.fc = torch.nn.Linear(32, 4)

    def forward(self, x):
        a1 = self.s1(x)
        a2 = self.s2(a1)
        a3 = self.s3(a2)
        return a1, a2, a3, self.fc(a3)


def at(fm, p=2):
    return F.normalize(fm.abs().pow(p).view(fm.size(0), 4, -1).mean(1), dim=1)


def at_loss(fm_s, fm_t):
    return (at(fm_s) - at(fm_t)).pow(2).mean()


_gb.setup()
teacher, student = Net(), Net()
for p in teacher.parameters():
    p.requires_grad_(False)
_gb.start(student)
optimizer = torch.optim.SGD(student.parameters(), lr=0.1, momentum=0.9)
betas = (500.0, 1000.0, 1000.0)
for it in range(4):
    x, y = torch.randn(16, 16), torch.randint(0, 4, (16,))
    *acts_s, logits = student(x)
    *acts_t, _ = teacher(x)
    cls_loss = F.cross_entropy(logits, y)
    at_losses = [b * at_loss(s, t).detach() for b, s, t in zip(betas, acts_s, acts_t)]  # BUG
    # FIX: at_losses = [b * at_loss(s, t) for b, s, t in zip(betas, acts_s, acts_t)]
    loss = cls_loss + sum(at_losses)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(student)
