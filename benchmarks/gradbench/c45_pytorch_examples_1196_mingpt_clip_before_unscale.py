"""minGPT-DDP trainer: gradients clipped while the GradScaler's scale is still in them.

source: pytorch/examples#1196 (https://github.com/pytorch/examples/issues/1196), "add scaler.unscale_(optimizer) before clip_grad_norm_" on distributed/minGPT-ddp/mingpt/trainer.py
family: clip-before-unscale
shape: Trainer._run_batch: self.scaler.scale(loss).backward(); torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_norm_clip); self.scaler.step(self.optimizer); self.scaler.update()
numeric: clip_grad_norm_ measures the norm 65536x too large and shrinks every update to a norm of about 1/65536 of the clip
watch: GG112
lint: GG112
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Trainer:
    def __init__(self, model, optimizer, grad_norm_clip=1.0):
        self.model, self.optimizer, self.grad_norm_clip = model, optimizer, grad_norm_clip
        self.scaler = torch.amp.GradScaler("cpu")

    def _run_batch(self, source, targets):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
            logits = self.model(source)
            loss = F.cross_entropy(logits, targets)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        # FIX: self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_norm_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.item()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Flatten(), torch.nn.Linear(32, 16))
_gb.start(model)
trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
for it in range(6):
    x = torch.randint(0, 16, (8, 4))
    trainer._run_batch(x, x[:, 0])
_gb.done(model)
