"""MNIST classifier trained without optimizer.zero_grad().

source: Stack Overflow question 60335387 "PyTorch MNIST example not converge" (https://stackoverflow.com/questions/60335387), one of TrainCheck's evaluation bugs (OrderLab/TrainCheck-Evaluation-Workloads, silent-issue-detection/bug-reprod-scripts/stackoverflow-60335387)
family: missing-clear
shape: the per-batch loop does model(data) -> loss -> loss.backward() -> optimizer.step() with no zero_grad anywhere
numeric: step t applies the sum of the gradients of batches 1..t; with Adam the direction drifts toward old batches and the loss stalls
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
_gb.start(model)
images, labels = torch.randn(64, 16), torch.randint(0, 10, (64,))
for epoch in range(2):
    for batch_idx in range(8):
        data, label = images[batch_idx * 8:(batch_idx + 1) * 8], labels[batch_idx * 8:(batch_idx + 1) * 8]
        # FIX: optimizer.zero_grad()
        pred_score = model(data)
        loss = F.cross_entropy(pred_score, label)
        loss.backward()
        optimizer.step()
_gb.done(model)
