"""torchtune recipe before token-normalised accumulation: per-batch mean divided by the accumulation steps.

source: meta-pytorch/torchtune#1875 (https://github.com/meta-pytorch/torchtune/pull/1875), "Normalize CE loss by total number of (non-padding) tokens": "(x1 / n1) + (x2 / n2) != (x1 + x2) / (n1 + n2)"
family: mean-of-means
shape: the recipe's loop: loss = loss_fn(logits, labels) (mean over non-ignored tokens); loss = loss / gradient_accumulation_steps; loss.backward(); step every gradient_accumulation_steps batches
numeric: the accumulated gradient is the mean of the micro-batch means, not the token mean of the window
watch: GG105
lint: out: the token counts of the micro-batches are data, unknown before run time
bug-step: 1
"""
import torch

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
_gb.start(model)
loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100)
sum_loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100, reduction="sum")
gradient_accumulation_steps = 2
batches = []
for n in (10, 2, 3, 10, 1, 8):
    tokens = torch.randint(0, 16, (1, 10))
    labels = torch.randint(0, 16, (1, 10))
    labels[:, n:] = -100
    batches.append((tokens, labels))
for idx, (tokens, labels) in enumerate(batches):
    if idx % gradient_accumulation_steps == 0:
        window = batches[idx:idx + gradient_accumulation_steps]
        num_tokens = sum(int((l != -100).sum()) for _, l in window)
    logits = model(tokens)
    loss = loss_fn(logits.flatten(0, 1), labels.flatten())  # BUG
    loss = loss / gradient_accumulation_steps  # BUG
    # FIX: loss = sum_loss_fn(logits.flatten(0, 1), labels.flatten()) / num_tokens
    loss.backward()
    if (idx + 1) % gradient_accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
_gb.done(model)
