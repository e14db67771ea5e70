"""Fast-LLM with loss masking and gradient accumulation: each micro-batch's cross entropy is averaged over its own valid tokens (`loss_mask.sum()`) and the accumulated gradients are then averaged over the micro-batches, so micro-batches with different numbers of valid tokens are weighed equally and a token's weight depends on how many valid tokens share its micro-batch.

source: ServiceNow/Fast-LLM#426 (https://github.com/ServiceNow/Fast-LLM/pull/426), "[Prototype] Normalising by valid tokens": "2. Incorrect grad & loss averaging with loss masking & grad. accumulation. When training with micro-batches grad. accumulation & loss masking, loss and grads are incorrectly averaged across micro-batches because of different number of valid tokens in each micro-batch (i.e. loss_mask.sum() are different across micro-batches)", with the proposed solution "calculate global number of valid tokens ... scale" (closed prototype: unconfirmed). The runner was not read; the language model is reduced to an embedding + linear model; 4 micro-batches with 5 to 44 valid tokens of 48. The twin scales each micro-batch's summed loss by the window's valid-token count, the proposed solution
family: mean-of-means
shape: Adam(lr=2e-3), 4 micro-batches of 4 sequences of 12 tokens per step with 5, 44, 12 and 30 valid tokens; 3 steps
numeric: every step weighs a token of the 5-token micro-batch 8.8x a token of the 44-token one
watch: GG105
lint: out: the valid-token counts of the micro-batches are data, unknown before run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

vocab, depth = 20, 4
_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Tanh(), torch.nn.Linear(16, vocab))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)


def micro_batch(n_valid):
    tokens = torch.randint(0, vocab, (4, 13))
    mask = torch.zeros(48, dtype=torch.bool)
    mask[torch.randperm(48)[:n_valid]] = True
    return tokens[:, :-1], tokens[:, 1:], mask.view(4, 12)


windows = [[micro_batch(n) for n in (5, 44, 12, 30)] for _ in range(3)]
for window in windows:
    total_valid = sum(int(mask.sum()) for _, _, mask in window)
    optimizer.zero_grad()
    for inputs, labels, loss_mask in window:
        losses = F.cross_entropy(model(inputs).reshape(-1, vocab), labels.reshape(-1), reduction="none")
        loss = (losses * loss_mask.reshape(-1)).sum() / loss_mask.sum() / depth  # BUG
        # FIX: loss = (losses * loss_mask.reshape(-1)).sum() / total_valid
        loss.backward()
    optimizer.step()
_gb.done(model)
