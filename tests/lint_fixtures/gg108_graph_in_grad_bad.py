"""GG108: backward(create_graph=True) outside a higher-order pattern."""
import torch


def gradient_penalty_through_grad(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward(create_graph=True)  # expect: GG108
        penalty = sum(p.grad.pow(2).sum() for p in model.parameters())
        penalty.backward()
        optimizer.step()
