"""FAMO's multi-task training step (`famo.py` example): `torch.nn.utils.clip_grad_norm_` is called before `loss.backward()`, so it clips the gradients left from before the clear (none) and the optimizer then steps on the new, unclipped gradients: the configured max-norm never acts.

source: Cranial-XIX/FAMO#4 (https://github.com/Cranial-XIX/FAMO/issues/4), "Question": "Why should `clip_grad_norm_` before `loss.backward()`?" (with a screenshot of the code). The author (Cranial-XIX): "Woof, thanks for catching this bug, it should be after ..." The code was not read beyond the question: the step is written as clear, weighted multi-task loss, clip, backward, step; FAMO's task weighting is reduced to fixed weights on two regression heads over a shared MLP trunk. The twin clips after backward, the author's correction
family: clip-misplaced
shape: Adam(lr=1e-3), max_norm 1.0; 6 steps on batches of 16
numeric: no step is clipped; the gradient norm is several times max_norm
watch: GG116
lint: GG116
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class MultiTask(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU())
        self.heads = torch.nn.ModuleList([torch.nn.Linear(32, 1), torch.nn.Linear(32, 1)])

    def forward(self, x):
        h = self.trunk(x)
        return [head(h) for head in self.heads]


_gb.setup()
data = [(torch.randn(16, 8), torch.randn(16, 2) * 4) for _ in range(6)]
model = MultiTask()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
weights = torch.tensor([0.6, 0.4])
for x, y in data:
    optimizer.zero_grad()
    preds = model(x)
    losses = torch.stack([F.mse_loss(p, y[:, i:i + 1]) for i, p in enumerate(preds)])
    loss = (weights * losses).sum()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # BUG
    loss.backward()
    # FIX: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
_gb.done(model)
