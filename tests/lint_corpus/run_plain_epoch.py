"""Plain epoch loop in the style of pytorch/examples mnist: clear, forward, backward, step."""
import torch
from torch import nn


def train(model, optimizer, loader, epoch, log_interval=2):
    model.train()
    running_loss = 0.0
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        output = model(data)
        loss = nn.functional.mse_loss(output, target)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
        if batch_idx % log_interval == 0:
            print(f"epoch {epoch} batch {batch_idx} loss {running_loss / (batch_idx + 1):.4f}")
    return running_loss


def main():
    torch.manual_seed(0)
    x = torch.randn(32, 4, dtype=torch.float64)
    y = torch.randn(32, 2, dtype=torch.float64)
    loader = [(x[i : i + 8], y[i : i + 8]) for i in range(0, 32, 8)]
    model = nn.Linear(4, 2).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(1, 4):
        train(model, optimizer, loader, epoch)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
