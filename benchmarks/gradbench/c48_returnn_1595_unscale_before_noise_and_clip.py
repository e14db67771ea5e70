"""RETURNN torch engine: gradient noise and clipping applied to gradients still scaled by the GradScaler.

source: rwth-i6/returnn#1595 (https://github.com/rwth-i6/returnn/pull/1595), "Torch: unscale gradients before noise and clipping" (fixes rwth-i6/returnn#1590)
family: clip-before-unscale
shape: self._grad_scaler.scale(total_loss).backward(); then the updater's step: gradient clipping by global norm (clip_grad_norm_) on the scaled gradients; then self._grad_scaler.step(optimizer)
numeric: the global-norm clip sees a norm 65536x too large: the Adam update direction is the clipped-to-nothing gradient, the step is far smaller than configured
watch: GG112
lint: GG112
bug-step: 1
"""
import torch

import _gb


class Updater:
    def __init__(self, model, grad_clip_global_norm=0.5):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.grad_clip_global_norm = grad_clip_global_norm

    def step(self, grad_scaler):
        if self.grad_clip_global_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip_global_norm)
        grad_scaler.step(self.optimizer)
        grad_scaler.update()


class Engine:
    def __init__(self, model):
        self._model = model
        self._updater = Updater(model)
        self._grad_scaler = torch.amp.GradScaler("cpu")

    def train_epoch(self, data):
        for x, y in data:
            self._updater.optimizer.zero_grad()
            total_loss = ((self._model(x) - y) ** 2).mean()
            self._grad_scaler.scale(total_loss).backward()
            # FIX: self._grad_scaler.unscale_(self._updater.optimizer)
            self._updater.step(self._grad_scaler)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(5, 10), torch.nn.Tanh(), torch.nn.Linear(10, 1))
_gb.start(model)
Engine(model).train_epoch([(torch.randn(8, 5), torch.randn(8, 1)) for _ in range(6)])
_gb.done(model)
