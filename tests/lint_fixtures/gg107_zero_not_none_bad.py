"""GG107: zero-filled gradients with an optimizer that still moves on zero gradients."""
import torch


def momentum(model, loader, loss_fn):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in loader:
        optimizer.zero_grad(set_to_none=False)  # expect: GG107
        loss_fn(model(x), y).backward()
        optimizer.step()


def adamw(model, loader, loss_fn):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for x, y in loader:
        model.zero_grad(False)  # expect: GG107
        loss_fn(model(x), y).backward()
        optimizer.step()
