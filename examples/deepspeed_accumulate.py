"""Exact gradient accumulation on a DeepSpeed engine (ZeRO-2), one process on a CPU.

    python examples/deepspeed_accumulate.py

Micro-batches of unequal size: DeepSpeed's own accumulation weights them alike (a mean
of means); gg.Accumulator(engine, steps) weights each by its item count, steps the
final partial window with its true weights, and calls engine.step() once per window.
Under torchrun (several processes) the same code is exact too.
"""

import os

import torch

# One process without a launcher: the rendezvous torchrun would set.
for key, value in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0").items():
    os.environ.setdefault(key, value)

import deepspeed  # noqa: E402

import gradguard as gg  # noqa: E402

# On a CPU, DeepSpeed would first compile a shared-memory all-reduce (minutes); gloo suffices here.
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
deepspeed.utils.logger.setLevel("WARNING")

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
start = [p.detach().clone() for p in model.parameters()]
config = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 4,      # the same as the Accumulator's steps
    "gradient_clipping": 1.0,              # applied by the engine to the exact window gradient
    "zero_optimization": {"stage": 2},
    "zero_allow_untested_optimizer": True,  # a torch optimizer under ZeRO
}
engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), config=config)

sizes = [8, 2, 5, 1, 7, 3]                 # 6 micro-batches: one full window of 4, then a partial one of 2
batches = [(torch.randn(n, 4), torch.randn(n, 1)) for n in sizes]

acc = gg.Accumulator(engine, steps=4)
for x, y in batches:
    loss = torch.nn.functional.mse_loss(engine(x), y)   # mean over the micro-batch's items
    acc.backward(loss, count=len(x))
    if acc.step():
        print(f"window stepped, exact mean loss {acc.loss:.4f}")
if acc.flush():                             # the partial window, with its true weights
    print(f"partial window stepped, exact mean loss {acc.loss:.4f}")

# The same two updates in plain PyTorch, one full batch per window.
reference = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
with torch.no_grad():
    for p, s in zip(reference.parameters(), start):
        p.copy_(s)
opt = torch.optim.SGD(reference.parameters(), lr=0.1)
for window in (batches[:4], batches[4:]):
    x, y = torch.cat([b[0] for b in window]), torch.cat([b[1] for b in window])
    torch.nn.functional.mse_loss(reference(x), y).backward()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
from deepspeed.utils import safe_get_full_fp32_param  # noqa: E402

diff = max((safe_get_full_fp32_param(p) - r).abs().max().item() for p, r in zip(engine.module.parameters(), reference.parameters()))
print(f"largest difference from full-batch training: {diff:.1e} (float32 round-off)")
