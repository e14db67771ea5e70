"""docs/distributed.md, "Out of memory anyway": `accumulate_batch` inside an Accumulator loop.

Run: python examples/accumulate_batch.py   (CPU, a few seconds)
"""
import torch
import torch.nn.functional as F

import gradguard as gg
from gradguard import accumulate_batch

torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
acc = gg.Accumulator(opt, steps=2)
loader = [(torch.randn(n, 8), torch.randint(0, 2, (n,))) for n in (40, 24, 56, 8)]


def loss_fn(m, b):
    return F.cross_entropy(m(b[0]), b[1])


size = 64
for batch in loader:                             # one Accumulator micro-batch each
    result = accumulate_batch(model, loss_fn, batch, size, acc=acc)
    size = result.micro_batch_size               # remember what fitted
    acc.step()
print("optimizer steps:", acc.optimizer_steps, "micro-batch size:", size, "window loss:", acc.loss)
