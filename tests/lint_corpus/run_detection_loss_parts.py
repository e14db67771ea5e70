"""A detection-style loop: the criterion returns the loss and a dict of its parts, which the
loop adds up per part for the progress line, as numbers."""
from collections import defaultdict

import torch
from torch import nn


def criterion(pred, target):
    box = (pred[:, :2] - target[:, :2]).abs().mean()
    cls = nn.functional.binary_cross_entropy_with_logits(pred[:, 2:], target[:, 2:])
    return box + cls, {"box": box, "cls": cls}


def train_epoch(model, loader, optimizer):
    totals = defaultdict(float)
    for images, targets in loader:
        optimizer.zero_grad()
        loss, parts = criterion(model(images), targets)
        loss.backward()
        optimizer.step()
        for name, part_loss in parts.items():
            totals[name] += part_loss.item() * images.shape[0]
    return dict(totals)


def main():
    torch.manual_seed(0)
    x = torch.randn(24, 5, dtype=torch.float64)
    y = torch.rand(24, 4, dtype=torch.float64)
    loader = [(x[i : i + 6], y[i : i + 6]) for i in range(0, 24, 6)]
    model = nn.Linear(5, 4).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        train_epoch(model, loader, optimizer)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
