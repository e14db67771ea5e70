"""action-detection's `binary_train.py` with `iter_size` accumulation: the optimizer steps when `i % iter_size == 0`, so the first window of every epoch holds one micro-batch (its gradient still divided by `iter_size` like a full window) and the epoch's trailing partial window is cleared at the next epoch's start without being applied.

source: yjxiong/action-detection#85 (https://github.com/yjxiong/action-detection/issues/85), "Some code errors in TAG": "find a IndentationError leads to logic errors, in binary_train.py#L185-L201 ... I have some idea to change this part of the code ... 1. avoid i=0，i % args.iter_size == 0 2. adapt len(train_loader)% args.iter_size != 0，instead of ignore remainder: if (i+1) % args.iter_size == 0 or (i+1)==len(train_loader): ... p.grad /= len(train_loader)% args.iter_size ... else: p.grad /= args.iter_size"; fixed by PR #88 ("fix grad update bug in binary_train.py", merged). binary_train.py's train() was read at a later commit (optimizer.zero_grad() before the loop; loss.backward(); if i % args.iter_size == 0: p.grad /= args.iter_size; clip; optimizer.step(); optimizer.zero_grad()); the TAG binary classifier is reduced to an MLP. The twin is the issue's proposal
family: underscaled-window
shape: SGD(lr=0.1, momentum=0.9), iter_size = 3, 2 epochs of 8 batches of 6
numeric: each epoch's first update applies 1/3 of one micro-batch's gradient, the next windows are shifted by one, and the last micro-batch of the epoch is never applied
watch: GG111 GG103
lint: out: which index the loop counts from and which test it steps on are arithmetic on a counter evaluated at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

iter_size = 3
_gb.setup()
train_loader = [(torch.randn(6, 14), torch.randint(0, 2, (6,))) for _ in range(8)]
model = torch.nn.Sequential(torch.nn.Linear(14, 24), torch.nn.ReLU(), torch.nn.Linear(24, 2))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(2):
    optimizer.zero_grad()
    for i, (x, y) in enumerate(train_loader):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if i % iter_size == 0:  # BUG
        # FIX: if (i + 1) % iter_size == 0 or (i + 1) == len(train_loader):
            for g in optimizer.param_groups:
                for p in g["params"]:
                    p.grad /= iter_size  # BUG
                    # FIX: p.grad /= len(train_loader) % iter_size if (i + 1) == len(train_loader) and len(train_loader) % iter_size != 0 else iter_size
            optimizer.step()
            optimizer.zero_grad()
_gb.done(model)
