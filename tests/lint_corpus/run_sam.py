"""Sharpness-aware minimisation: two forward/backward passes per step, gradients cleared between
them after the first pass's p.grad has been read into the perturbation."""
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    x = torch.randn(32, 4, dtype=torch.float64)
    y = (x[:, :1] > 0).double()
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).double()
    base_optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.BCEWithLogitsLoss()
    rho = 0.05
    for epoch in range(3):
        for i in range(0, 32, 8):
            inputs, targets = x[i : i + 8], y[i : i + 8]
            # first pass: gradient at w
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            with torch.no_grad():
                grad_norm = torch.norm(torch.stack([p.grad.norm(p=2) for p in model.parameters() if p.grad is not None]), p=2)
                scale = rho / (grad_norm + 1e-12)
                eps = []
                for p in model.parameters():
                    e_w = p.grad * scale
                    p.add_(e_w)  # climb to the local maximum w + e(w)
                    eps.append(e_w)
            base_optimizer.zero_grad()
            # second pass: gradient at w + e(w)
            loss_fn(model(inputs), targets).backward()
            with torch.no_grad():
                for p, e_w in zip(model.parameters(), eps):
                    p.sub_(e_w)  # back to w
            base_optimizer.step()
            base_optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
