"""pytorch-i3d train_i3d.py: the micro-batches left after an epoch's last full accumulation window are wiped by the zero_grad that starts the validation phase.

source: piergiaj/pytorch-i3d#44 (https://github.com/piergiaj/pytorch-i3d/issues/44) and #57 (https://github.com/piergiaj/pytorch-i3d/issues/57): "num_steps_per_update must be a divider of len(dataloader) ... Otherwise, calculated loss values for leftover forward passes are zerod when phase changes from train to val"; "the leftover accumulated training gradiens are zeroed before calling optimizer.step() when phase change from training to validation"; the maintainer (#57) confirms the validation phase's gradients are only cleared ("the gradients from the validation step are never applied") and that "the loss.backward() could be removed from the validation step". Code read: train_i3d.py (num_steps_per_update = 4; optimizer.zero_grad() at the start of each phase; loss = (0.5*loc_loss + 0.5*cls_loss)/num_steps_per_update; step only when num_iter == num_steps_per_update and phase == 'train'). No fix was published; the twin steps the leftover window divided by its own size and drops the validation backward (validation runs without a graph), as the maintainer suggests
family: dropped-window
shape: while steps < max_steps: for phase in ['train', 'val']: model.train(phase == 'train'); num_iter = 0; optimizer.zero_grad(); for data in dataloaders[phase]: num_iter += 1; loss = (0.5*loc_loss + 0.5*cls_loss)/num_steps_per_update; loss.backward(); if num_iter == num_steps_per_update and phase == 'train': steps += 1; num_iter = 0; optimizer.step(); optimizer.zero_grad(); lr_sched.step(). 6 training batches per epoch, SGD momentum 0.9 as in the script
numeric: 2 of every 6 training micro-batches never reach an update; the twin's second step is that leftover window
watch: GG102
lint: GG102
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


def run(model, dataloaders, max_steps, num_steps_per_update=4):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.0000001)
    lr_sched = torch.optim.lr_scheduler.MultiStepLR(optimizer, [300, 1000])
    steps = 0
    while steps < max_steps:
        for phase in ['train', 'val']:
            model.train(phase == 'train')
            num_iter = 0
            optimizer.zero_grad()
            for inputs, labels in dataloaders[phase]:
                num_iter += 1
                per_frame_logits = model(inputs).transpose(1, 2)  # BUG
                # FIX: with torch.set_grad_enabled(phase == 'train'):
                # FIX:     per_frame_logits = model(inputs).transpose(1, 2)
                loc_loss = F.binary_cross_entropy_with_logits(per_frame_logits, labels)
                cls_loss = F.binary_cross_entropy_with_logits(torch.max(per_frame_logits, dim=2)[0],
                                                              torch.max(labels, dim=2)[0])
                loss = (0.5 * loc_loss + 0.5 * cls_loss) / num_steps_per_update
                loss.backward()  # BUG
                # FIX: if phase == 'train':
                # FIX:     loss.backward()
                if num_iter == num_steps_per_update and phase == 'train':
                    steps += 1
                    num_iter = 0
                    optimizer.step()
                    optimizer.zero_grad()
                    lr_sched.step()
            # FIX: if phase == 'train' and num_iter > 0:
            # FIX:     for p in model.parameters():
            # FIX:         p.grad.mul_(num_steps_per_update / num_iter)
            # FIX:     steps += 1
            # FIX:     optimizer.step()
            # FIX:     optimizer.zero_grad()
            # FIX:     lr_sched.step()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
_gb.start(model)
train = [(x, (x[..., :3] > 0).to(x.dtype).transpose(1, 2)) for x in (torch.randn(2, 5, 10) for _ in range(6))]
val = [(x, (x[..., :3] > 0).to(x.dtype).transpose(1, 2)) for x in (torch.randn(2, 5, 10) for _ in range(2))]
run(model, {'train': train, 'val': val}, max_steps=3)
_gb.done(model)
