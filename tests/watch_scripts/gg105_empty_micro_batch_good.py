"""GG105 with an all-ignored micro-batch, fixed, and a window that is non-finite for another reason.

The fix sums each micro-batch's token losses and divides by the window's token
count, so an empty micro-batch adds nothing. The second loop's losses are NaN
because of the data (a NaN input), with equal token counts and equal weights:
not a weighting error, so not GG105.
"""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
accum = 2
batches = []
for n_prompt in (4, 8, 4, 4):  # the second micro-batch is all prompt: every label is -100
    ids = torch.randint(0, 16, (1, 8))
    labels = ids.clone()
    labels[:, :n_prompt] = -100
    batches.append((ids, labels))
for i, (ids, labels) in enumerate(batches):
    window = batches[i - i % accum:i - i % accum + accum]
    num_items = sum(int((lab != -100).sum()) for _, lab in window)
    loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    (loss / num_items).backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()

head = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
for i in range(4):
    x = torch.randn(6, 4)
    if i == 1:
        x[0, 0] = float("nan")  # a bad input: the loss is NaN, the counts are still equal
    (F.cross_entropy(head(x), torch.randint(0, 3, (6,))) / accum).backward()
    if (i + 1) % accum == 0:
        opt.step()
        opt.zero_grad()
