"""torchvision references/classification/train.py (train_one_epoch, --amp): the AMP branch backpropagates the scaled loss and calls `scaler.step(optimizer)` and `scaler.update()`, and then, outside the branch, the loop clips (`--clip-grad-norm`) and calls `optimizer.step()` again: every batch is applied twice, the second time with the gradient clipped after the first step.

source: pytorch/vision#4874 (https://github.com/pytorch/vision/pull/4874), "fix bug in training model by amp" (merged): "This PR: Moves model prediction inside the autocast context; Performs gradient clipping properly when autocast is enabled; Stops calling optimizer step twice when autocast is enabled." The review diff shows the pre-fix tail (else: loss = criterion(output, target); loss.backward(); then, for both branches, if args.clip_grad_norm is not None: nn.utils.clip_grad_norm_(utils.get_optimizer_params(optimizer), args.clip_grad_norm); optimizer.step()) and the fix moving the clip and the step into the non-AMP branch (the AMP branch unscales, clips and calls scaler.step). The ResNet is reduced to a small MLP classifier; the scaler runs on the CPU; autocast is left out (the prediction's placement is not the mechanism measured). The twin is the fixed loop
family: misplaced-step
shape: SGD(lr=0.1, momentum=0.9, weight_decay=1e-4) as the reference's defaults; clip_grad_norm = 1.0; GradScaler("cpu"); 6 batches of 32
numeric: every batch is applied twice (the second time clipped), instead of once after the clip
watch: GG101
lint: GG101
bug-step: 1
"""
import torch
import torch.nn as nn

import _gb


class Args:
    amp = True
    clip_grad_norm = 1.0


_gb.setup()
args = Args()
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
_gb.start(model)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cpu") if args.amp else None
for i in range(6):
    image, target = 3 * torch.randn(32, 32), torch.randint(0, 10, (32,))
    output = model(image)
    optimizer.zero_grad()
    if args.amp:
        loss = criterion(output, target)
        scaler.scale(loss).backward()
        # FIX: if args.clip_grad_norm is not None:
        # FIX:     scaler.unscale_(optimizer)
        # FIX:     nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
        scaler.step(optimizer)
        scaler.update()
    else:
        loss = criterion(output, target)
        loss.backward()
        # FIX: if args.clip_grad_norm is not None:
        # FIX:     nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
        # FIX: optimizer.step()
    if args.clip_grad_norm is not None:  # BUG
        nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)  # BUG
    optimizer.step()  # BUG
_gb.done(model)
