"""tt-train nanogpt demo: with gradient accumulation the demo clips the gradients after every backward pass, not only when the accumulation helper says it is time to step, so each window's partial sums are clipped along the way and the step's gradient is not the clip of the window's gradient.

source: tenstorrent/tt-metal#17568 (https://github.com/tenstorrent/tt-metal/issues/17568), "[tt-train] grad sync and clipping should happen only during stepping in the presence of grad accumulation" (labelled bug, closed): "In the nanogpt demo, we currently clip grads after every backward pass, regardless of whether the gradient accumulation helper says it's time to step. We need to change the demo so that grads are clipped only before an optimizer step is to take place." The demo is C++ (tt-train) and was not read: the loop is written in PyTorch as the issue describes it (loss / accumulation_steps, backward, clip, step and zero_grad when the helper says so); nanogpt is reduced to a small embedding + MLP language model. The twin clips only before the step, as the issue asks
family: clip-in-accumulation
shape: AdamW(lr=3e-3), clip 0.1 (where it binds at this model's gradient scale), 4 micro-batches of 8 sequences per step, 3 steps
numeric: every micro-batch's partial sum is clipped to norm 0.1, so the later micro-batches weigh more than the earlier
watch: GG115
lint: GG115
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

vocab, accumulation_steps, clip = 32, 4, 0.1
_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 32), torch.nn.GELU(), torch.nn.Linear(32, vocab))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
data = torch.randint(0, vocab, (12, 8, 17))
for i, batch in enumerate(data):
    logits = model(batch[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1)) / accumulation_steps
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)  # BUG
    if (i + 1) % accumulation_steps == 0:
        # FIX: torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
