# mutation: skip loss-tensor-in-sum (train_step returns a detached loss already)
"""A trainer class whose methods call each other: fit -> train_epoch -> train_step."""
import torch
from torch import nn


class Trainer:
    def __init__(self, model, lr=0.05, grad_accum=2):
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.loss_fn = nn.MSELoss()
        self.grad_accum = grad_accum
        self.global_step = 0
        self.history = []

    def train_step(self, batch, step, last):
        x, y = batch
        loss = self.loss_fn(self.model(x), y) / self.grad_accum
        loss.backward()
        if (step + 1) % self.grad_accum == 0 or last:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.global_step += 1
        return loss.detach()

    def train_epoch(self, loader):
        self.model.train()
        epoch_loss = 0.0
        for step, batch in enumerate(loader):
            loss = self.train_step(batch, step, last=step == len(loader) - 1)
            epoch_loss += loss.item()
        self.history.append(epoch_loss)

    def fit(self, loader, epochs):
        for _ in range(epochs):
            self.train_epoch(loader)
        return self.history


def main():
    torch.manual_seed(0)
    x = torch.randn(24, 3, dtype=torch.float64)
    y = x.sum(dim=1, keepdim=True) ** 2
    loader = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 24, 4)]
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1)).double()
    Trainer(model).fit(loader, epochs=3)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
