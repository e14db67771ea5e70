"""prime-rl trainer: each micro-batch's summed token loss is normalised by that micro-batch's own number of loss tokens (and divided by the number of micro-batches) instead of by the whole batch's token count, so a token in a short micro-batch weighs more than one in a long micro-batch.

source: PrimeIntellect-ai/prime-rl#583 (https://github.com/PrimeIntellect-ai/prime-rl/pull/583), "Fix normalizing by batch tokens": "This PR fixes an issue where we wrongly normalize the micro-batch by the number of tokens per micro-batch, instead of per-batch. We want to normalize with respect to the entire batch ... we want x/c = x_1/(nc) + ... + x_n/(nc). However, currently we compute x_1/(n c_1) + ... + x_n/(n c_n)". A reviewer (samsja): "lgtm"; the PR is open. The trainer's code was not read: the loop follows the PR's formula (per-token loss summed under a loss mask, divided by n times the micro-batch's own count), with a small token model and loss masks of different lengths. The twin divides by the batch's token count, as the PR does
family: mean-of-means
shape: for batch in batches: total_tokens = sum of the masks; for micro_batch in batch (n = 4, loss tokens per micro-batch 3 to 24): loss = (token_loss * mask).sum() / (n * mask.sum()); loss.backward(); then optimizer.step(); optimizer.zero_grad(). AdamW(lr=1e-3), 4 batches
numeric: each step's gradient weighs micro-batches by 1/their token count instead of equally per token
watch: GG105
lint: out: the token counts of the micro-batches are data, unknown before run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 10))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
n = 4
batches = []
for _ in range(4):
    micro_batches = []
    for length in (3, 8, 14, 24):
        ids = torch.randint(0, 10, (2, 12))
        mask = torch.zeros(2, 12)
        mask.view(-1)[:length] = 1
        micro_batches.append((ids, ids.roll(-1, 1), mask))
    batches.append(micro_batches)
for batch in batches:
    total_tokens = sum(mask.sum() for _, _, mask in batch)
    for input_ids, labels, loss_mask in batch:
        logits = model(input_ids)
        token_loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view_as(loss_mask)
        loss = (token_loss * loss_mask).sum() / (n * loss_mask.sum())  # BUG
        # FIX: loss = (token_loss * loss_mask).sum() / total_tokens
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
