"""Loss divided by the running micro-step counter instead of the accumulation count.

source: karpathy/nanoGPT#605 (https://github.com/karpathy/nanoGPT/issues/605), a proposal to write loss / (micro_step + 1) "since we've accumulated (micro_step+1) gradients"; closed, not applied to nanoGPT (this case is the proposed code)
family: counter-divisor
shape: for micro_step in range(gradient_accumulation_steps): loss = loss / (micro_step + 1); loss.backward()
numeric: micro-batches are weighted 1, 1/2, 1/3, 1/4: the window gradient is (1 + 1/2 + 1/3 + 1/4) = 2.08 micro-batch means, skewed toward the first micro-batch
watch: GG105
lint: GG105
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 16))
optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
_gb.start(model)
gradient_accumulation_steps = 4
for iter_num in range(3):
    for micro_step in range(gradient_accumulation_steps):
        X, Y = torch.randint(0, 16, (4, 8)), torch.randint(0, 16, (4, 8))
        loss = F.cross_entropy(model(X).flatten(0, 1), Y.flatten())
        loss = loss / (micro_step + 1)  # BUG
        # FIX: loss = loss / gradient_accumulation_steps
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
_gb.done(model)
