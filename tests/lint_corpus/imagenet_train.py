"""pytorch/examples imagenet: train() with AverageMeters, AMP scaler and a device-agnostic loop."""
import time

import torch


class AverageMeter:
    def __init__(self, name):
        self.name = name
        self.reset()

    def reset(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def train(train_loader, model, criterion, optimizer, epoch, device, scaler, args):
    batch_time = AverageMeter("Time")
    losses = AverageMeter("Loss")
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(train_loader):
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, enabled=args.amp):
            output = model(images)
            loss = criterion(output, target)
        losses.update(loss.item(), images.size(0))
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        batch_time.update(time.time() - end)
        end = time.time()
        if i % args.print_freq == 0:
            print(f"Epoch [{epoch}][{i}] loss {losses.avg:.4f}")


def validate(val_loader, model, criterion, device):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for images, target in val_loader:
            output = model(images.to(device))
            total += criterion(output, target.to(device)).item()
    return total / len(val_loader)
