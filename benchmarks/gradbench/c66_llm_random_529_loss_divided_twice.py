"""llm-random: the micro-batch loss divided by the accumulation steps twice.

source: llm-random/llm-random#529 (https://github.com/llm-random/llm-random/pull/529), "fix grad acc" (merged); review: "losses are already divided by grad accumulation steps in hack for garbage collection"
family: overscaled
shape: _loss_and_gradient_step: for each of gradient_accumulation_steps micro-batches: loss = calculate_loss(...) / gradient_accumulation_steps (inside the helper that frees the graph early) and again loss / gradient_accumulation_steps before loss.backward(); one optimizer.step() per window
numeric: each step's gradient is 1/gradient_accumulation_steps (here 1/4) of the window mean
watch: GG113
lint: GG113
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


def calculate_loss(model, x, y, gradient_accumulation_steps):
    # the "hack for garbage collection": reduce to a scaled scalar right away
    return F.cross_entropy(model(x), y) / gradient_accumulation_steps


_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Flatten(), torch.nn.Linear(24, 16))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
gradient_accumulation_steps = 4
for step in range(3):
    for micro in range(gradient_accumulation_steps):
        x = torch.randint(0, 16, (4, 3))
        loss = calculate_loss(model, x, x[:, -1], gradient_accumulation_steps)
        loss = loss / gradient_accumulation_steps  # BUG
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
