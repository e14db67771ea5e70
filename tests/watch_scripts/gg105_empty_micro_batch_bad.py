"""GG105: a micro-batch whose labels are all ignored still takes 1/accum of the window's weight.

cross_entropy over no targets is 0/0 (NaN) with a zero gradient, so the other
micro-batch's tokens get half the weight they should: the step is half the
window's mean although every non-empty micro-batch has the same token count.
"""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
accum = 2
for i, n_prompt in enumerate((4, 8, 4, 4)):  # the second micro-batch is all prompt: every label is -100
    ids = torch.randint(0, 16, (1, 8))
    labels = ids.clone()
    labels[:, :n_prompt] = -100
    loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), ignore_index=-100)
    (loss / accum).backward()  # BUG: the empty micro-batch's NaN mean still counts as one of accum
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
