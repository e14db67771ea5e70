"""README, "Accelerate and Fabric": the Accumulator drives an Accelerate `Accelerator`, exact for any split.

Run: python examples/accelerate_exact.py   (CPU, a few seconds; needs the `accelerate` package)
"""
import sys

import torch
from accelerate import Accelerator

import gradguard as gg

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
start = [p.detach().clone() for p in model.parameters()]
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [(torch.randn(n, 4), torch.randn(n, 1)) for n in (3, 8, 5, 6)]  # one window of unequal micro-batches

accelerator = Accelerator(cpu=True)  # no gradient_accumulation_steps: the Accumulator accumulates
model, opt = accelerator.prepare(model, opt)
acc = gg.Accumulator(opt, steps=4, model=model, accelerator=accelerator, max_grad_norm=1.0)
for x, y in loader:
    with acc.microbatch():  # no_sync except at the window's end
        acc.backward(torch.nn.functional.mse_loss(model(x), y), count=len(x))
    acc.step()
acc.flush()

# The reference: plain PyTorch, one step on the whole batch from the same start, clipped alike.
ref = torch.nn.Linear(4, 1)
with torch.no_grad():
    for p, s in zip(ref.parameters(), start):
        p.copy_(s)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
x, y = torch.cat([b[0] for b in loader]), torch.cat([b[1] for b in loader])
torch.nn.functional.mse_loss(ref(x), y).backward()
torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
ref_opt.step()

update = max((p.detach() - s).abs().max().item() for p, s in zip(model.parameters(), start))
error = max((p.detach() - r.detach()).abs().max().item() for p, r in zip(model.parameters(), ref.parameters()))
exact = error <= 1e-5 * update  # float32 rounding
print(f"update {update:.3g}; largest difference from the full-batch step {error:.1e} "
      f"-> {'exact (float32 rounding)' if exact else 'NOT the full-batch step'}")
sys.exit(0 if exact else 1)
