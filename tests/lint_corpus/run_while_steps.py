"""An iteration-based loop (while step < max_steps) with accumulation over an iterator that restarts."""
import torch
from torch import nn


def infinite(loader):
    while True:
        for batch in loader:
            yield batch


def main():
    torch.manual_seed(0)
    x = torch.randn(20, 3, dtype=torch.float64)
    y = torch.randn(20, 1, dtype=torch.float64)
    loader = [(x[i : i + 5], y[i : i + 5]) for i in range(0, 20, 5)]
    model = nn.Linear(3, 1).double()
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1)
    grad_accum_steps = 3
    max_steps = 5
    step = 0
    data_iter = infinite(loader)
    while step < max_steps:
        loss_accum = 0.0
        for micro in range(grad_accum_steps):
            xb, yb = next(data_iter)
            loss = nn.functional.l1_loss(model(xb), yb) / grad_accum_steps
            loss_accum += loss.item()
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        print(step, loss_accum)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
