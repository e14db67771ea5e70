"""Onsets and Frames train.py: `clip_grad_norm_` runs after `optimizer.step()`, so the update uses the unclipped gradient and the clip only edits a gradient the next `zero_grad()` discards.

source: jongwook/onsets-and-frames#24 (https://github.com/jongwook/onsets-and-frames/issues/24), "Gradient clipping in the wrong place?": "In your train.py line 101, you have the gradient clipping after the .backward() and .step() operations. Shouldn't we put the clip_grad_norm_ in between .backward() and .step()?" The author (jongwook): "Yeah it definitely should. I'm not sure why I did like that. In practice the gradient was well below the clip value during most of the training though." Code read (train.py): predictions, losses = model.run_on_batch(batch); loss = sum(losses.values()); optimizer.zero_grad(); loss.backward(); optimizer.step(); scheduler.step(); if clip_gradient_norm: clip_grad_norm_(model.parameters(), clip_gradient_norm). The transcriber is reduced to a small MLP with onset/offset/frame heads (binary cross-entropy each); inputs are scaled so that the gradient norm exceeds clip_gradient_norm = 3 early in training, as the author says it did only rarely. The twin clips between backward and step
family: clip-misplaced
shape: as quoted; Adam(lr=0.0006), StepLR(step_size=10000, gamma=0.98), clip_gradient_norm = 3, 8 iterations
numeric: every update whose gradient norm exceeds 3 uses the unclipped gradient
watch: GG116
lint: GG116
bug-step: 1
"""
import torch
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_
from torch.optim.lr_scheduler import StepLR

import _gb


class OnsetsAndFrames(torch.nn.Module):
    def __init__(self, n_mels=16, n_keys=8):
        super().__init__()
        self.trunk = torch.nn.Sequential(torch.nn.Linear(n_mels, 32), torch.nn.ReLU())
        self.heads = torch.nn.ModuleDict({k: torch.nn.Linear(32, n_keys) for k in ("onset", "offset", "frame")})

    def run_on_batch(self, batch):
        h = self.trunk(batch["mel"])
        predictions = {k: head(h) for k, head in self.heads.items()}
        losses = {f"loss/{k}": F.binary_cross_entropy_with_logits(predictions[k], batch[k]) for k in self.heads}
        return predictions, losses


_gb.setup()
model = OnsetsAndFrames()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), 0.0006)
scheduler = StepLR(optimizer, step_size=10000, gamma=0.98)
clip_gradient_norm = 3
batches = []
for _ in range(8):
    mel = 20 * torch.randn(8, 16)
    batches.append({"mel": mel, **{k: (mel[:, :8] > s).float() for k, s in (("onset", 10.0), ("offset", -10.0), ("frame", 0.0))}})
for i, batch in enumerate(batches):
    predictions, losses = model.run_on_batch(batch)
    loss = sum(losses.values())
    optimizer.zero_grad()
    loss.backward()
    # FIX: if clip_gradient_norm:
    # FIX:     clip_grad_norm_(model.parameters(), clip_gradient_norm)
    optimizer.step()
    scheduler.step()
    if clip_gradient_norm:  # BUG
        clip_grad_norm_(model.parameters(), clip_gradient_norm)  # BUG
_gb.done(model)
