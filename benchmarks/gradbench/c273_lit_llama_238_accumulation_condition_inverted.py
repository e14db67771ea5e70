"""lit-llama finetune_full.py: the accumulation test reads `is_accumulating = (iter_num + 1) % gradient_accumulation_steps == 0`, the negation of what it means, so the optimizer steps after every micro-batch except every g-th one, whose gradient is carried into the next step; each update applies one micro-batch (or two) instead of a window of g.

source: Lightning-AI/lit-llama#238 (https://github.com/Lightning-AI/lit-llama/pull/238), a one-character fix of the accumulation condition in finetune_full.py (== to !=); a maintainer: "Great catch". The fixed loop (finetune/full.py, read) keeps `is_accumulating = (iter_num + 1) % gradient_accumulation_iters != 0`, `fabric.no_backward_sync(model, enabled=is_accumulating)`, `fabric.backward(loss)` and `if not is_accumulating: optimizer.step(); optimizer.zero_grad()`; the loss is not divided by the window size in either version, and the case keeps that. Fabric is reduced to plain backward (one process, so no_backward_sync does nothing), LLaMA to a small causal MLP language model over a 32-token vocabulary, AdamW to SGD (so the update is linear in the gradient). The twin has the != test
family: misplaced-step
shape: SGD(lr=0.05), gradient_accumulation_steps 4, 12 micro-batches of 8 sequences of 9 tokens; the bug steps 9 times (after micro-batches 0 1 2, 4 5 6, 8 9 10; steps 4 and 7 also carry micro-batches 3 and 7), the twin 3 times
numeric: each update applies one or two micro-batches instead of four, three times as many updates
watch: out: every micro-batch's gradient is applied once and cleared; a step after one micro-batch looks like training without accumulation, and the steps with two passes are unscaled exactly like the twin's windows of four
lint: out: which remainder the accumulation test compares against is arithmetic on the loop counter, the program's intent
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps = 4
max_iters = 12
vocab, block = 32, 8


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, vocab))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.randint(0, vocab, (max_iters, 8, block + 1))
for iter_num in range(max_iters):
    is_accumulating = (iter_num + 1) % gradient_accumulation_steps == 0  # BUG
    # FIX: is_accumulating = (iter_num + 1) % gradient_accumulation_steps != 0
    input_ids, targets = data[iter_num, :, :-1], data[iter_num, :, 1:]
    logits = model(input_ids)
    loss = loss_fn(logits, targets)
    loss.backward()
    if not is_accumulating:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
