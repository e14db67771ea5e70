# mutation: skip clear-after-backward (the window's rescaling reads .grad before the step: with the clearing moved before it the program stops on a None gradient, a loud error rather than the silent bug the operator seeds)
"""Accumulation to a number of examples (torchseq's form): the optimizer steps once the
micro-batches seen add up to `optim_batch_size` examples, and the remainder is stepped after the
epoch, its gradient weighted by its own size."""
import torch
from torch import nn


def train_epoch(model, loader, optimizer, optim_batch_size):
    steps_accum = 0
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y, reduction="sum") / optim_batch_size
        loss.backward()
        steps_accum += len(x)
        if steps_accum >= optim_batch_size:
            for p in model.parameters():
                p.grad.mul_(optim_batch_size / steps_accum)
            optimizer.step()
            optimizer.zero_grad()
            steps_accum = 0
    if steps_accum > 0:
        for p in model.parameters():
            p.grad.mul_(optim_batch_size / steps_accum)
        optimizer.step()
        optimizer.zero_grad()


def main():
    torch.manual_seed(0)
    x = torch.randn(44, 6, dtype=torch.float64)
    y = torch.randint(0, 3, (44,))
    loader = [(x[i : i + 6], y[i : i + 6]) for i in range(0, 44, 6)]
    model = nn.Linear(6, 3).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    for _ in range(2):
        train_epoch(model, loader, optimizer, 16)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
