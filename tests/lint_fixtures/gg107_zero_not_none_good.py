"""GG107: correct code of the same shapes (no finding expected)."""
import torch


def plain_sgd(model, loader, loss_fn):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad(set_to_none=False)
        loss_fn(model(x), y).backward()
        optimizer.step()


def none_is_fine(model, loader, loss_fn):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
