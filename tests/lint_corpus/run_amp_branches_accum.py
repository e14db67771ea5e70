"""LAVIS-style inner loop: AMP is chosen once for the run (``use_amp = scaler is not None``) and
each branch back-propagates and steps its own way; the last, partial window is stepped after the
loop with its gradients weighted by its own size (its losses were divided by the full window)."""
import torch
from torch import nn


def train_inner_loop(model, optimizer, loader, scaler, accum_grad_iters):
    use_amp = scaler is not None
    i = -1
    for i, (x, y) in enumerate(loader):
        with torch.autocast(device_type="cpu", enabled=use_amp):
            loss = nn.functional.mse_loss(model(x), y)
            loss /= accum_grad_iters
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (i + 1) % accum_grad_iters == 0:
            if use_amp:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()
    if (i + 1) % accum_grad_iters != 0:  # the last window has (i + 1) % accum_grad_iters micro-batches
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(accum_grad_iters / ((i + 1) % accum_grad_iters))
        if use_amp:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad()


def main():
    torch.manual_seed(0)
    x = torch.randn(40, 4, dtype=torch.float64)
    y = x.sum(dim=1, keepdim=True).tanh()
    loader = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 40, 4)]  # 10 batches: windows of 3, 3, 3, 1
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1)).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    for _ in range(2):
        train_inner_loop(model, optimizer, loader, None, accum_grad_iters=3)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
