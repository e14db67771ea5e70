"""GSM main.py: with iter_size > 1 the gradients are clipped after every backward pass, giving clip(clip(g1) + g2) instead of clip(g1 + g2).

source: swathikirans/GSM#22 (https://github.com/swathikirans/GSM/issues/22), "Confused with the codes using grads clipping and accumulation simultaneously": "I think the clipped and accumulated grads of your codes are clip(clip(grads1)+grads2), not clip(grads1+grads2), which makes more sense for me"; the author: "The second case indeed makes more sense ... I will update the code with the second setting"
family: clip-in-accumulation
shape: train(): for i, (input, target) in enumerate(train_loader): output = model(input_var); loss = criterion(output, target_var) / args.iter_size; loss.backward(); if args.clip_gradient is not None: total_norm = clip_grad_norm_(model.parameters(), args.clip_gradient); if (i + 1) % args.iter_size == 0: optimizer.step(); optimizer.zero_grad(). iter_size = 2, clip_gradient = 20, SGD momentum 0.9
numeric: the first micro-batch of each pair is clipped alone, then the pair's sum again
watch: GG115
lint: GG115
bug-step: 1
"""
import torch
from torch.nn.utils import clip_grad_norm_

import _gb


class Args:
    iter_size = 2
    clip_gradient = 20
    lr = 0.01


def train(train_loader, model, criterion, optimizer, args):
    model.train()
    optimizer.zero_grad()
    for i, (input, target) in enumerate(train_loader):
        output = model(input)
        loss = criterion(output, target) / args.iter_size
        loss.backward()
        if args.clip_gradient is not None:  # BUG
            total_norm = clip_grad_norm_(model.parameters(), args.clip_gradient)  # BUG
        if (i + 1) % args.iter_size == 0:
            # FIX: if args.clip_gradient is not None:
            # FIX:     total_norm = clip_grad_norm_(model.parameters(), args.clip_gradient)
            optimizer.step()
            optimizer.zero_grad()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), Args.lr, momentum=0.9, weight_decay=5e-4)
criterion = torch.nn.CrossEntropyLoss()
train_loader = [(60 * x, (x[:, 0] > 0).long() * 3) for x in (torch.randn(8, 10) for _ in range(8))]
for epoch in range(2):
    train(train_loader, model, criterion, optimizer, Args())
_gb.done(model)
