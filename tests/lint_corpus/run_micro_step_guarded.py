"""nanoGPT-style micro-step loop whose backward pass is guarded: a non-finite micro-batch loss is
skipped rather than poisoning the window's gradient."""
import torch
from torch import nn

GRADIENT_ACCUMULATION_STEPS = 4


def train(model, batches, optimizer, iters):
    for it in range(iters):
        for micro_step in range(GRADIENT_ACCUMULATION_STEPS):
            x, y = batches[(it * GRADIENT_ACCUMULATION_STEPS + micro_step) % len(batches)]
            loss = nn.functional.mse_loss(model(x), y)
            loss = loss / GRADIENT_ACCUMULATION_STEPS
            if torch.isfinite(loss):
                loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def main():
    torch.manual_seed(0)
    x = torch.randn(32, 5, dtype=torch.float64)
    y = x.sum(dim=1, keepdim=True)
    batches = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 32, 4)]
    model = nn.Linear(5, 1).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    train(model, batches, optimizer, 4)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
