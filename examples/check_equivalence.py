"""README, "Exact accumulation": `gg.check_equivalence` on your own model and loss.

Run: python examples/check_equivalence.py   (CPU, a few seconds)
"""
import torch
import torch.nn.functional as F

import gradguard as gg

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
batch = (torch.randn(24, 6), torch.randint(0, 3, (24,)))
report = gg.check_equivalence(model, lambda m, b: F.cross_entropy(m(b[0]), b[1]), batch, splits=4)
print(report)

with_bn = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 3))
print(gg.check_equivalence(with_bn, lambda m, b: F.cross_entropy(m(b[0]), b[1]), batch, splits=4))
