"""A small training script with the classic gradient-buffer bugs, bundled for the demo.

``gradguard demo`` runs it under the watch and lints its source. Each function is
one mistake people really make; none of them raises in plain PyTorch. Run it
directly (``python -m gradguard.demo.buggy_loop``) and nothing complains.
"""

import torch
from torch import nn


def make_data(n_batches=10, batch_size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch_size, 16, generator=g), torch.randn(batch_size, 1, generator=g)) for _ in range(n_batches)]


def forgot_zero_grad(model, data):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in data:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()  # .grad still holds every earlier batch


def zero_grad_every_microbatch(model, data, accum=4):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for i, (x, y) in enumerate(data):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()


def unscaled_accumulation_and_dropped_remainder(model, data, accum=4):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    running_loss = 0.0
    for i, (x, y) in enumerate(data):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        running_loss += loss
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    return running_loss


BUGGY_LOOPS = (forgot_zero_grad, zero_grad_every_microbatch, unscaled_accumulation_and_dropped_remainder)


def main():
    data = make_data()
    for loop in BUGGY_LOOPS:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        loop(model, data)


if __name__ == "__main__":
    main()
