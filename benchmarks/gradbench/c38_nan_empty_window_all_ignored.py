"""A micro-batch whose labels are all ignored: its mean loss is 0/0 and NaN reaches every gradient.

source: meta-llama/llama-cookbook#133 (https://github.com/meta-llama/llama-cookbook/issues/133), "evaluation loss is nan": an instruction longer than the truncation length leaves every label at -100, and CrossEntropyLoss returns nan
family: mean-of-means
shape: SFT with prompt tokens masked to -100, each micro-batch mean divided by the accumulation steps; a micro-batch holding only prompt tokens has no target, so cross_entropy(..., ignore_index=-100) returns NaN (its gradient is zero)
numeric: the logged loss is NaN, and the window is a mean of micro-batch means in which the empty micro-batch still takes half the weight: the update is off by tens of percent
watch: GG105
lint: out: the counts are data
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
_gb.start(model)
gradient_accumulation_steps = 2
batches = []
for n_prompt in (3, 8, 4, 2):
    ids = torch.randint(0, 16, (1, 8))
    labels = ids.clone()
    labels[:, :n_prompt] = -100
    batches.append((ids, labels))
for idx, (ids, labels) in enumerate(batches):
    if idx % gradient_accumulation_steps == 0:
        num_items = sum(int((l != -100).sum()) for _, l in batches[idx:idx + gradient_accumulation_steps])
    logits = model(ids)
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100) / gradient_accumulation_steps  # BUG
    # FIX: loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum") / num_items
    loss.backward()
    if (idx + 1) % gradient_accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
