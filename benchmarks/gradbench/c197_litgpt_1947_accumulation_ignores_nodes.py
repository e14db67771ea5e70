"""LitGPT gradient accumulation on several nodes: the number of accumulation iterations is computed from the global batch size divided by the devices per node and the micro-batch size, without the number of nodes, so on N nodes every rank accumulates N times more micro-batches per optimizer step than configured (an N times larger global batch, N times fewer steps).

source: Lightning-AI/litgpt#1947 (https://github.com/Lightning-AI/litgpt/pull/1947), "Fix: incorrect gradient accumulation steps bug" (merged, labelled bug): "current gradient accumulation steps calculation does not take into account multi-node setup." (see #1927). The code was not read: the count is written as the description has it (global_batch_size // (devices * micro_batch_size) before, // (devices * num_nodes * micro_batch_size) after); one rank of a 2-node, 1-device run is simulated in one process (the ranks' mean is the same computation on other data); each loss divided by the accumulation count, as LitGPT does. The twin includes the number of nodes, the fix
family: overscaled
shape: AdamW(lr=2e-3); global_batch_size 16, micro_batch_size 2, devices 1, num_nodes 2; 24 micro-batches
numeric: 3 steps of 8 micro-batches each instead of 6 steps of 4
watch: out: the window's micro-batches are scaled for the window the loop runs; which size the configuration meant is not in the gradient buffers
lint: out: the accumulation count is computed from configuration values at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

global_batch_size, micro_batch_size, devices, num_nodes = 16, 2, 1, 2
gradient_accumulation_iters = global_batch_size // (devices * micro_batch_size)  # BUG
# FIX: gradient_accumulation_iters = global_batch_size // (devices * num_nodes * micro_batch_size)
_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 32))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
data = torch.randint(0, 32, (24, micro_batch_size, 9))
for iter_num, batch in enumerate(data, start=1):
    is_accumulating = iter_num % gradient_accumulation_iters != 0
    logits = model(batch[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 32), batch[:, 1:].reshape(-1))
    (loss / gradient_accumulation_iters).backward()
    if not is_accumulating:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
