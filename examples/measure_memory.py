"""docs/distributed.md, "memory planning": `gg.measure_memory` and its table.

Run: python examples/measure_memory.py   (CPU, a few seconds)
"""
import torch
import torch.nn.functional as F

import gradguard as gg

model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
batch = (torch.randn(32, 64), torch.randint(0, 10, (32,)))


def loss_fn(m, b):
    return F.cross_entropy(m(b[0]), b[1])


report = gg.measure_memory(model, loss_fn, batch, [1, 2, 4, 8, 16, 32])
print(report.table(budget=2 * 2**30))
