"""aTLAS fine-tuning with gradient accumulation: each micro-batch's mean loss is backpropagated as it is and the optimizer steps every `accumulation` micro-batches, so each window's gradient is the sum of its micro-batch gradients, `accumulation` times the mean.

source: fredzzhang/atlas#26 (https://github.com/fredzzhang/atlas/pull/26), "normalise the loss by the number of accumulation steps" (merged). Only the title was read: the loop is the usual one (loss = criterion(logits, labels); loss.backward(); step and zero_grad every accumulation micro-batches); the learned task-vector coefficients are reduced to an MLP classifier, and the optimizer to SGD with momentum (under AdamW the summed gradient's scale would mostly cancel; the fix matters there through the clip and the epsilon). The twin divides each loss by the accumulation steps, the fix
family: unscaled
shape: SGD(lr=0.05, momentum=0.9), 4 micro-batches of 16 per step, 3 steps
numeric: every step's gradient is 4 times the window mean
watch: GG104
lint: GG104
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

accumulation = 4
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 5))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = [(torch.randn(16, 32), torch.randint(0, 5, (16,))) for _ in range(12)]
for i, (images, labels) in enumerate(data):
    logits = model(images)
    loss = F.cross_entropy(logits, labels)
    # FIX: loss = loss / accumulation
    loss.backward()
    if (i + 1) % accumulation == 0:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
