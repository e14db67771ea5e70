"""A unit test that checks every parameter moves: each case builds its own module and its own SGD,
back-propagates once and steps once. No clearing is needed: nothing is stepped twice."""
import itertools

import torch
from torch import nn


def check_cases(widths, scales):
    moved = []
    for width, scale in itertools.product(widths, scales):
        layer = nn.Linear(width, 2).double()
        trainable = {n: p for n, p in layer.named_parameters() if p.requires_grad}
        before = {n: p.detach().clone() for n, p in trainable.items()}
        pretend_loss = (layer(torch.ones(3, width, dtype=torch.float64)) * scale).sum()
        pretend_loss.backward()
        dummy_optim = torch.optim.SGD(trainable.values(), 1)
        dummy_optim.step()
        moved.append(all(bool(p.ne(before[n]).any()) for n, p in trainable.items()))
        yield layer


def main():
    torch.manual_seed(0)
    layers = list(check_cases([2, 3], [1.0, 0.5]))
    return [p.detach().clone() for layer in layers for p in layer.parameters()]


if __name__ == "__main__":
    main()
