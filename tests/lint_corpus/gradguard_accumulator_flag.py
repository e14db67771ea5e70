"""gradguard's exact Accumulator under a flag, beside the plain full-batch iteration it must
match (the Accumulator scales, steps, schedules and clears itself)."""
import torch
from torch import nn

import gradguard as gg


def run(accumulate, base, data):
    model = nn.Linear(3, 2).double()
    model.load_state_dict(base.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    acc = gg.Accumulator(opt, steps=3, scheduler=sched) if accumulate else None
    seen = 0.0
    for x, y in data:
        if accumulate:
            for a, b in ((0, 1), (1, 6), (6, 10)):
                loss = nn.functional.mse_loss(model(x[a:b]), y[a:b])
                acc.backward(loss, count=b - a)
                acc.step()
                seen += loss.item()
        else:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            seen += loss.item()
    return [p.detach().clone() for p in model.parameters()]


def main():
    torch.manual_seed(0)
    base = nn.Linear(3, 2).double()
    data = [(torch.randn(10, 3, dtype=torch.float64), torch.randn(10, 2, dtype=torch.float64)) for _ in range(3)]
    return run(True, base, data) + run(False, base, data)


if __name__ == "__main__":
    main()
