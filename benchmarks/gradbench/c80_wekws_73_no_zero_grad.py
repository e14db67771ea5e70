"""wekws Executor.train: optimizer.step() with no optimizer.zero_grad() anywhere, so every step re-applies all earlier gradients.

source: wenet-e2e/wekws#72 (https://github.com/wenet-e2e/wekws/issues/72), "Questions about optimizer.zero_grad()": "when optimizer.step() is called, optimizer.zero_grad() is not called"; the maintainer: "It's a bug"; fixed by wenet-e2e/wekws#73 (https://github.com/wenet-e2e/wekws/pull/73), optimizer.zero_grad() added above loss.backward() in kws/utils/executor.py
family: missing-clear
shape: Executor.train(model, optimizer, data_loader, ...): for batch_idx, batch: logits = model(feats); loss, acc = criterion(logits, target, lengths); loss.backward(); grad_norm = clip_grad_norm_(model.parameters(), clip); if torch.isfinite(grad_norm): optimizer.step()
numeric: step t applies the sum of the first t gradients (Adam, clip 50 as in the recipe)
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_

import _gb


class Executor:
    def train(self, model, optimizer, data_loader, args):
        model.train()
        clip = args.get("grad_clip", 50.0)
        for batch_idx, (feats, target) in enumerate(data_loader):
            logits = model(feats)
            loss = F.binary_cross_entropy_with_logits(logits.max(dim=1).values.squeeze(-1), target)
            # FIX: optimizer.zero_grad()
            loss.backward()
            grad_norm = clip_grad_norm_(model.parameters(), clip)
            if torch.isfinite(grad_norm):
                optimizer.step()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
data = [(f, (f.mean(dim=(1, 2)) > 0).to(f.dtype)) for f in (torch.randn(4, 5, 10) for _ in range(6))]
executor = Executor()
for epoch in range(2):
    executor.train(model, optimizer, data, {"grad_clip": 50.0})
_gb.done(model)
