"""SpeechBrain core.py (Brain.fit_batch with auto_mix_prec): the scaled loss is backpropagated and `check_gradients` clips with `torch.nn.utils.clip_grad_norm_(self.modules.parameters(), self.max_grad_norm)` before any `scaler.unscale_`, so under mixed precision the clip acts on the scaled gradients.

source: speechbrain/speechbrain#615 (https://github.com/speechbrain/speechbrain/pull/615), "Amp4 gradient clipping" (merged): "As stated in issue#612, the change is adding an unscaling step for amp before gradient clipping (as recommended by Pytorch documentation)." A maintainer (mravanelli): "Thank you @vielzeuf. I tested and everything seems to work." The pre-fix core.py was not read: fit_batch follows the Brain's shape at the time (with autocast(): outputs = self.compute_forward(batch, Stage.TRAIN); loss = self.compute_objectives(...); self.scaler.scale(loss).backward(); if self.check_gradients(loss): self.scaler.step(self.optimizer); self.optimizer.zero_grad(); self.scaler.update()), check_gradients clipping with max_grad_norm = 5.0 and returning whether the loss is finite. The model is reduced to a small MLP classifier over random features; the scaler runs on the CPU; autocast is left out. The twin adds `self.scaler.unscale_(self.optimizer)` before check_gradients, as the pull request does
family: clip-before-unscale
shape: Adam(lr=1e-3), max_grad_norm = 5.0, GradScaler("cpu"); 6 batches
numeric: every step's gradient is clipped to 5 / scale in norm instead of 5
watch: GG112
lint: GG112
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Brain:
    def __init__(self, modules, max_grad_norm=5.0):
        self.modules = modules
        self.optimizer = torch.optim.Adam(modules.parameters(), lr=1e-3)
        self.scaler = torch.amp.GradScaler("cpu")
        self.max_grad_norm = max_grad_norm

    def compute_forward(self, batch):
        return self.modules(batch[0])

    def compute_objectives(self, outputs, batch):
        return F.cross_entropy(outputs, batch[1])

    def check_gradients(self, loss):
        if not torch.isfinite(loss):
            return False
        torch.nn.utils.clip_grad_norm_(self.modules.parameters(), self.max_grad_norm)
        return True

    def fit_batch(self, batch):
        outputs = self.compute_forward(batch)
        loss = self.compute_objectives(outputs, batch)
        self.scaler.scale(loss).backward()
        # FIX: self.scaler.unscale_(self.optimizer)
        if self.check_gradients(loss):
            self.scaler.step(self.optimizer)
        self.optimizer.zero_grad()
        self.scaler.update()
        return loss.detach()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(40, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
_gb.start(model)
brain = Brain(model)
for i in range(6):
    brain.fit_batch((5 * torch.randn(16, 40), torch.randint(0, 10, (16,))))
_gb.done(model)
