"""LBFGS needs a closure that clears, re-evaluates and back-propagates (pytorch/examples time_sequence_prediction)."""
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 20, dtype=torch.float64).unsqueeze(1)
    y = torch.sin(3 * x)
    model = nn.Sequential(nn.Linear(1, 10), nn.Tanh(), nn.Linear(10, 1)).double()
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=5)
    for i in range(4):

        def closure():
            optimizer.zero_grad()
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
            return loss

        loss = optimizer.step(closure)
        print("step", i, loss.item())
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
