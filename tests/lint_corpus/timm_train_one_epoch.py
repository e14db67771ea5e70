"""timm / DeiT style: train_one_epoch(model, loader, optimizer, loss_scaler, accum_steps) with
a loss scaler object that does backward, clipping and step, and an update on the window's
last micro-batch or the loader's last batch."""
import math
import sys

import torch
from torch import nn


class NativeScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler()

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, need_update=True):
        self._scaler.scale(loss).backward()
        if need_update:
            if clip_grad is not None:
                self._scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(parameters, clip_grad)
            self._scaler.step(optimizer)
            self._scaler.update()


def train_one_epoch(model, criterion, loader, optimizer, device, epoch, loss_scaler, accum_steps=1, clip_grad=None, lr_scheduler=None):
    model.train()
    last_idx = len(loader) - 1
    num_updates = epoch * math.ceil(len(loader) / accum_steps)
    optimizer.zero_grad()
    for batch_idx, (samples, targets) in enumerate(loader):
        last_batch = batch_idx == last_idx
        need_update = last_batch or (batch_idx + 1) % accum_steps == 0
        samples = samples.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            outputs = model(samples)
            loss = criterion(outputs, targets)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            print(f"Loss is {loss_value}, stopping training")
            sys.exit(1)
        loss = loss / accum_steps
        loss_scaler(loss, optimizer, clip_grad=clip_grad, parameters=model.parameters(), need_update=need_update)
        if not need_update:
            continue
        num_updates += 1
        optimizer.zero_grad()
        if lr_scheduler is not None:
            lr_scheduler.step_update(num_updates=num_updates)
    return num_updates


def run(args, model, criterion, loader, device):
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    loss_scaler = NativeScaler()
    for epoch in range(args.epochs):
        train_one_epoch(model, criterion, loader, optimizer, device, epoch, loss_scaler, args.accum_iter, args.clip_grad)
