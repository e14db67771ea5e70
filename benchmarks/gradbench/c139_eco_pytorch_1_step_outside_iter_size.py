"""ECO-pytorch main.py train(): with iter_size > 1 the gradients of iter_size batches are accumulated, scaled down and stepped inside the `if i % args.iter_size == 0` block, but a second `optimizer.step()` outside the block steps after every batch, applying the partly accumulated (and, after the window's step, already applied momentum) gradients again.

source: mzolfaghari/ECO-pytorch#1 (https://github.com/mzolfaghari/ECO-pytorch/pull/1, merged), "Misplaced optimizer step": "This pull request fixes duplicate optimizer step when using iter_size > 1. Original code performed step even outside the iter_size 'if' clause. Accuracy improves for iter_size > 1 vs original version." The author (mzolfaghari) merged it: "Thanks. Seems that scaling down gradients should be replaced with dividing loss by itersize." The code was not read: the loop follows the TSN-style train() the PR describes (loss.backward(); if i % args.iter_size == 0: scale each p.grad by 1/iter_size; clip_grad_norm(model.parameters(), args.clip_gradient); optimizer.step(); optimizer.zero_grad(); and the extra optimizer.step() after the block). The video network is reduced to an MLP classifier. The twin drops the step outside the block, as the PR does; like the published code it keeps `i % iter_size == 0` with i from 0, so its first window is one batch divided by iter_size (a second, smaller defect the PR does not touch) The twin drops the duplicate step, as the pull request does, and closes whole windows (`(i + 1) % iter_size == 0`, 12 batches): the merged loop's `i % iter_size == 0` steps its first window after one pass divided by iter_size (a defect of its own, which the watch reports as GG111).
family: misplaced-step
shape: for i, (input, target) in enumerate(train_loader): loss = criterion(model(input), target); loss.backward(); if i % iter_size == 0: grads /= iter_size; clip_grad_norm(20); optimizer.step(); optimizer.zero_grad(); optimizer.step() (the duplicate). iter_size = 4, SGD(lr=0.01, momentum=0.9, weight_decay=5e-4), 12 batches
numeric: every batch's extra step applies the window's partial sum (not yet scaled) on top of the window steps
watch: GG101
lint: GG101
bug-step: 1
"""
import torch
from torch.nn.utils import clip_grad_norm_

import _gb


class Args:
    iter_size = 4
    clip_gradient = 20


def train(train_loader, model, criterion, optimizer, args):
    model.train()
    optimizer.zero_grad()
    for i, (input, target) in enumerate(train_loader):
        output = model(input)
        loss = criterion(output, target)
        loss.backward()
        if i % args.iter_size == 0:  # BUG
        # FIX: if (i + 1) % args.iter_size == 0:  # whole windows only (at i = 0 the test closes a window of one pass)
            # scale down gradients when iter size is functioning
            if args.iter_size != 1:
                for g in optimizer.param_groups:
                    for p in g["params"]:
                        p.grad /= args.iter_size
            if args.clip_gradient is not None:
                clip_grad_norm_(model.parameters(), args.clip_gradient)
            optimizer.step()
            optimizer.zero_grad()
        optimizer.step()  # BUG


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 24), torch.nn.ReLU(), torch.nn.Linear(24, 6))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
train_loader = [(torch.randn(4, 10), torch.randint(0, 6, (4,))) for _ in range(12)]
train(train_loader, model, torch.nn.CrossEntropyLoss(), optimizer, Args())
_gb.done(model)
