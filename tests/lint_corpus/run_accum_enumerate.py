"""Flat accumulation loop: step every `accum_steps` batches (the common tutorial form)."""
# mutation: skip drop-last-window (12 batches in windows of 3: the remainder block never runs, the mutant trains the same)
import torch
from torch import nn


def train_epoch(model, loader, optimizer, loss_fn, accum_steps):
    model.train()
    total_loss = 0.0
    optimizer.zero_grad()
    for i, (inputs, labels) in enumerate(loader):
        outputs = model(inputs)
        loss = loss_fn(outputs, labels)
        loss = loss / accum_steps
        loss.backward()
        total_loss += loss.item()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    if (i + 1) % accum_steps != 0:  # the last, partial window: its losses were divided by accum_steps
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(accum_steps / ((i + 1) % accum_steps))
        optimizer.step()
        optimizer.zero_grad()
    return total_loss


def main():
    torch.manual_seed(0)
    x = torch.randn(48, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (48,))
    loader = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 48, 4)]
    model = nn.Linear(5, 3).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        train_epoch(model, loader, optimizer, nn.CrossEntropyLoss(), accum_steps=3)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
