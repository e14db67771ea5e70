"""Ray's DeepSpeed fine-tuning template: the loss tensor summed for logging.

source: ray-project/ray#40940 (https://github.com/ray-project/ray/pull/40940), "Make sure that loss can be freed after every iteration": loss_sum += loss in finetune_hf_llm.py kept the loss tensors alive (closes #40714, a memory leak)
family: graph-logging
shape: outputs = model(**batch); loss = outputs.loss; loss_sum += loss; backward; step; loss_sum is reported every few steps
numeric: the loss tensors and their graph nodes stay reachable between reports: memory grows with the reporting interval
watch: out: no gradient is wrong; the run-time watch checks .grad buffers, not logging tensors
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 32))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
_gb.start(model)
loss_sum = torch.tensor(0.0)
for step in range(20):
    batch = torch.randint(0, 32, (2, 8))
    loss = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
    loss_sum += loss  # BUG
    # FIX: loss_sum += loss.item()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model, kept=loss_sum)
