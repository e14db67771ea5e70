"""Accelerate's accumulation example: the loss denominator counts the first label of each sequence, which the model never predicts.

source: huggingface/accelerate#4303 (https://github.com/huggingface/accelerate/pull/4303), "Fix next-token labels and loss normalization in the accumulation example": "The loss denominator also counts the first label of each sequence, which the model never predicts"
family: num-items
shape: num_items_in_batch = sum((batch["labels"] != -100).sum() for batch in the window); loss = sum of shifted token losses / num_items_in_batch; backward per micro-batch inside accelerator.accumulate
numeric: every gradient is scaled by targets / (targets + rows): too small by a few to tens of percent depending on the sequence lengths
watch: out: the micro-batches are weighted consistently; only the common denominator is off, which needs the label semantics to see
lint: out: the count expression is plausible code; its off-by-one needs the model's label shift
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(20, 8), torch.nn.Linear(8, 20))
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
_gb.start(model)
gradient_accumulation_steps = 2
batches = []
for n in (4, 8, 3, 6, 2, 8):
    ids = torch.randint(1, 20, (2, 8))
    labels = ids.clone()
    labels[:, n:] = -100
    batches.append({"input_ids": ids, "labels": labels})
for start in range(0, len(batches), gradient_accumulation_steps):
    window = batches[start:start + gradient_accumulation_steps]
    num_items_in_batch = sum(int((b["labels"] != -100).sum()) for b in window)  # BUG
    # FIX: num_items_in_batch = sum(int((b["labels"][..., 1:] != -100).sum()) for b in window)
    for batch in window:
        logits = model(batch["input_ids"])
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), batch["labels"][:, 1:].flatten(),
                               ignore_index=-100, reduction="sum") / num_items_in_batch
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
