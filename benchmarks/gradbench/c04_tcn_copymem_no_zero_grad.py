"""TCN copy-memory task trained without zero_grad.

source: locuslab/TCN#7 (https://github.com/locuslab/TCN/pull/7), "added missing zero_grad to copytest training"
family: missing-clear
shape: the copy-memory train() loop: per batch, model output -> cross-entropy over the sequence -> backward -> gradient clipping -> step; the clearing was missing
numeric: clipping is applied to the accumulated (ever-growing) gradient, so updates hit the clip every step and point along the running sum
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Conv1d(5, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv1d(8, 5, 1))
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
_gb.start(model)
seqs = torch.randint(0, 5, (24, 12))
for i in range(0, 24, 4):
    x = F.one_hot(seqs[i:i + 4], 5).transpose(1, 2).to(torch.get_default_dtype())
    y = seqs[i:i + 4]
    # FIX: optimizer.zero_grad()
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
_gb.done(model)
