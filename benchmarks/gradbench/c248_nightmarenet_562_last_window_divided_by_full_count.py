"""NightmareNet's BERT-base SST-2 scaling script: with gradient accumulation over a micro-batch count that is not a multiple of `grad_accum`, the last optimizer step still divides each of its losses by `grad_accum`, so the final (partial) window applies a fraction of its mean gradient.

source: Adit-Jain-srm/NightmareNet#562 (https://github.com/Adit-Jain-srm/NightmareNet/pull/562), "feat: add memory-optimized BERT-base SST-2 scaling config", review finding on scripts/run_bert_base_scaling.py: "When the micro-batch count is not divisible by `grad_accum`, the last optimizer step divides its loss by `grad_accum` even if it contains fewer micro-batches. With 125 micro-batches and `grad_accum=4`, the final update has one quarter of its intended gradient. Calculate the current accumulation-window size and use it in both loss branches." The script was not read beyond the review's excerpt (`loss = model(**enc, labels=labels).loss / grad_accum`); the AMP branch is left out (CPU) and BERT is reduced to an MLP classifier. The twin divides by the window's real size, the review's proposal
family: underscaled-window
shape: AdamW(lr=2e-3), grad_accum = 4 over 10 micro-batches of 4: windows of 4, 4 and 2
numeric: the last update applies 2/4 of its window's mean gradient
watch: GG111
lint: out: how many micro-batches the last window holds is arithmetic on the data length, evaluated at run time
bug-step: 3
"""
import torch
import torch.nn.functional as F

import _gb

grad_accum = 4
_gb.setup()
batches = [(torch.randn(4, 16), torch.randint(0, 2, (4,))) for _ in range(10)]
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
total_micro_batches = len(batches)
optimizer.zero_grad()
for i, (x, labels) in enumerate(batches):
    window = min(grad_accum, total_micro_batches - (i // grad_accum) * grad_accum)
    loss = F.cross_entropy(model(x), labels) / grad_accum  # BUG
    # FIX: loss = F.cross_entropy(model(x), labels) / window
    loss.backward()
    if (i + 1) % grad_accum == 0 or i + 1 == total_micro_batches:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
