"""BatchNorm in training mode under gradient accumulation: each micro-batch normalises with its own statistics.

source: NVIDIA/DeepLearningExamples#625 (https://github.com/NVIDIA/DeepLearningExamples/issues/625), "Batch Norm Update & Loss Avg for Grad accumulation": the maintainers: "Batchnorm stats get updated based on the stats from the current batch (not the accumulated batch)"; microsoft/Swin-Transformer#107 states the equivalence holds only without such layers
family: batch-stats
shape: a CNN with BatchNorm2d trained with loss / accumulation_steps over micro-batches of 2 images, meant to stand for batches of 8
numeric: the accumulated gradient is not the full-batch gradient (normalisation statistics of 2 images instead of 8); no loss scaling can make it equal. The twin trains on the full batch of 8
watch: GG109
lint: out: whether a module holds BatchNorm is known only at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
_gb.start(model)
accumulation_steps = 4
for step in range(2):
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 3, (8,))
    for micro_x, micro_y in zip(x.chunk(accumulation_steps), y.chunk(accumulation_steps)):  # BUG
        loss = F.cross_entropy(model(micro_x), micro_y) / accumulation_steps  # BUG
        loss.backward()  # BUG
    # FIX: F.cross_entropy(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
