"""Accumulation over a loader whose length is no multiple of the window: the last, partial
window is stepped after the loop with its gradients weighted by its own size (K / K')."""
import torch
from torch import nn


def train_epoch(model, loader, optimizer, loss_fn, accum_steps):
    i = -1
    for i, (inputs, labels) in enumerate(loader):
        loss = loss_fn(model(inputs), labels) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    if (i + 1) % accum_steps != 0:  # the last window has (i + 1) % accum_steps micro-batches
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(accum_steps / ((i + 1) % accum_steps))
        optimizer.step()
        optimizer.zero_grad()


def main():
    torch.manual_seed(0)
    x = torch.randn(44, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (44,))
    loader = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 44, 4)]  # 11 batches: windows of 3, 3, 3, 2
    model = nn.Linear(5, 3).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        train_epoch(model, loader, optimizer, nn.CrossEntropyLoss(), accum_steps=3)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
