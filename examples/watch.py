"""README, "The run-time watch": `gg.watch(mode="raise")` stops a loop at its gradient-buffer bug.

Run: python examples/watch.py   (CPU, a few seconds)
"""
import torch

import gradguard as gg

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train():
    for step in range(3):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        optimizer.step()  # gradguard: ignore[GG101]  (the bug this example shows: no zero_grad)
        print("stepped", step)


try:
    with gg.watch(mode="raise"):          # or "warn" (default), "record"
        train()                           # raises GradientBugError at the offending call
except gg.GradientBugError as exc:
    print("stopped:", exc.finding.format())
    assert exc.finding.code == "GG101"
else:
    raise SystemExit("the watch should have stopped the stale second step")
