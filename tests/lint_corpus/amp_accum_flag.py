# mutation: skip drop-last-window (the function asserts (n // 4) % args.accum == 0: the last-batch term never adds a step)
"""A training script whose AMP and accumulation are switched by command-line flags: each
branch is its own loop shape (scaled accumulation windows, or a plain full iteration)."""
import argparse

import torch
from torch import nn


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--amp", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2)
    return p.parse_args(argv)


def train(args, model, data, target):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(enabled=args.amp and device == "cuda")
    n = data.shape[0]
    assert (n // 4) % args.accum == 0  # whole windows: every loss is divided by args.accum
    for epoch in range(args.epochs):
        running = 0.0
        for i in range(0, n, 4):
            x, y = data[i : i + 4], target[i : i + 4]
            if args.accum > 1:
                with torch.autocast(device_type=device, enabled=args.amp and device == "cuda"):
                    loss = nn.functional.mse_loss(model(x), y)
                    loss = loss / args.accum
                scaler.scale(loss).backward()
                if ((i // 4) + 1) % args.accum == 0 or i + 4 >= n:
                    scaler.unscale_(optimizer)
                    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad(set_to_none=True)
            else:
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast(device_type=device, enabled=args.amp and device == "cuda"):
                    loss = nn.functional.mse_loss(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            running += loss.item()
        print(f"epoch {epoch} loss {running:.4f}")
    return model


def main():
    out = []
    for argv in (["--accum", "2"], []):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1)).double()
        data = torch.randn(24, 5, dtype=torch.float64)
        target = data.sum(dim=1, keepdim=True)
        train(parse_args(argv), model, data, target)
        out += [p.detach().clone() for p in model.parameters()]
    return out


if __name__ == "__main__":
    main()
