"""nanochat SFT: gradient accumulation over variable-length conversations scaled by the step count.

source: karpathy/nanochat#59 (https://github.com/karpathy/nanochat/pull/59), "Fix gradient accumulation for variable length sequences": gradients were scaled by grad_accum_steps assuming equal tokens per batch
family: mean-of-means
shape: for micro_step in range(grad_accum_steps): loss = model(x, y) (mean over the targets not masked with -1); (loss / grad_accum_steps).backward(); the fix sums the loss and divides the gradients by the window's token count
numeric: a conversation's tokens weigh 1/(K * n_i): short conversations dominate; error tens of percent when lengths vary 1..12
watch: GG105
lint: out: the token counts of the micro-batches are data, unknown before run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
embed, head = torch.nn.Embedding(24, 8), torch.nn.Linear(8, 24)
model = torch.nn.Sequential(embed, torch.nn.Tanh(), head)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
_gb.start(model)
grad_accum_steps = 4
lengths = [1, 12, 3, 9, 2, 12, 12, 4]


def next_batch(i):
    x = torch.randint(0, 24, (1, 12))
    y = torch.randint(0, 24, (1, 12))
    y[:, lengths[i]:] = -1
    return x, y


for step in range(2):
    # FIX: num_tokens = sum(min(n, 12) for n in lengths[step * grad_accum_steps:(step + 1) * grad_accum_steps])
    for micro_step in range(grad_accum_steps):
        x, y = next_batch(step * grad_accum_steps + micro_step)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-1)  # BUG
        loss = loss / grad_accum_steps  # BUG
        # FIX: loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-1, reduction="sum") / num_tokens
        loss.backward()
    optimizer.step()
    model.zero_grad(set_to_none=True)
_gb.done(model)
