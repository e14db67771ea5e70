"""Erasing-Attention-Consistency main.py: `running_loss += loss` sums the loss tensors of the epoch, and train() returns that sum, so every batch's graph is kept until the next epoch.

source: zyh-uaiaaaa/Erasing-Attention-Consistency#11 (https://github.com/zyh-uaiaaaa/Erasing-Attention-Consistency/issues/11), "Memory leak": "You have a memory leak during training here (src/main.py#L80) ... For solving this problem, I used .detach() ... And memory stoped leak." (with a memory profile). Code read: src/main.py train(): loss = loss1 + args.lam * flip_loss_l; optimizer.zero_grad(); loss.backward(); optimizer.step(); ... running_loss += loss; after the loop running_loss = running_loss / iter_cnt; return acc, running_loss; main() keeps train_loss. The issue is open without a maintainer reply; the twin detaches the loss before summing it, as the reporter did
family: graph-logging
shape: def train(args, model, train_loader, optimizer, scheduler, device): running_loss = 0.0; for batch_i, (imgs1, labels, indexes, imgs2) in enumerate(train_loader): output, hm1 = model(imgs1); output_flip, hm2 = model(imgs2); loss1 = CrossEntropyLoss()(output, labels); flip_loss_l = ACLoss(hm1, hm2, grid_l, output); loss = loss1 + args.lam * flip_loss_l; optimizer.zero_grad(); loss.backward(); optimizer.step(); correct_sum += correct_num; running_loss += loss; scheduler.step(); return acc, running_loss / iter_cnt. for i in epochs: train_acc, train_loss = train(...)
numeric: the returned epoch loss reaches the graphs (two forward passes each) of every batch of the epoch
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn as nn

import _gb


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        self.fc = nn.Linear(4, 7)

    def forward(self, x):
        feat = self.features(x)
        hm = torch.einsum("nchw,kc->nkhw", feat, self.fc.weight)
        return self.fc(feat.mean((2, 3))), hm


def ACLoss(hm1, hm2, output):
    return ((hm1 - hm2.flip(3)) ** 2).mean()


class Args:
    lam = 5


def train(args, model, train_loader, optimizer, scheduler):
    running_loss = 0.0
    iter_cnt = 0
    correct_sum = 0
    model.train()
    for batch_i, (imgs1, labels, imgs2) in enumerate(train_loader):
        output, hm1 = model(imgs1)
        output_flip, hm2 = model(imgs2)
        loss1 = nn.CrossEntropyLoss()(output, labels)
        flip_loss_l = ACLoss(hm1, hm2, output)
        loss = loss1 + args.lam * flip_loss_l
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        iter_cnt += 1
        _, predicts = torch.max(output, 1)
        correct_num = torch.eq(predicts, labels).sum()
        correct_sum += correct_num
        running_loss += loss  # BUG
        # FIX: running_loss += loss.detach()
    scheduler.step()
    running_loss = running_loss / iter_cnt
    acc = correct_sum.float() / float(sum(len(b[1]) for b in train_loader))
    return acc, running_loss


_gb.setup()
model = Model()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.0001, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
train_loader = [(x, torch.randint(0, 7, (4,)), x.flip(3)) for x in (torch.randn(4, 3, 6, 6) for _ in range(8))]
for i in range(1, 3):
    train_acc, train_loss = train(Args(), model, train_loader, optimizer, scheduler)
_gb.done(model, kept=[train_loss])
