"""Catalyst OptimizerCallback: grad_clip_fn applied after the AMP engine's scaled backward, before unscaling.

source: catalyst-team/catalyst#1319 (https://github.com/catalyst-team/catalyst/issues/1319), "Unscale gradients before gradient clipping": "OptimizerCallback doesn't handle AMP correctly"
family: clip-before-unscale
shape: (reproduced with the clip on the window's last micro-batch only, so that the twin can unscale once per step) on_batch_end: engine.backward_loss(loss, model, optimizer) (scaler.scale(loss).backward() under AMP); if self.grad_clip_fn is not None: self.grad_clip_fn(model.parameters()); if need_gradient_step: engine.optimizer_step(...) (scaler.step; scaler.update); engine.zero_grad(...)
numeric: every micro-batch's accumulated gradient is clipped while scaled: the step applies a gradient about 65536x too small
watch: GG112
lint: GG112
bug-step: 1
"""
from functools import partial

import torch
import torch.nn.functional as F

import _gb


class AMPEngine:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cpu")

    def backward_loss(self, loss, model, optimizer):
        self.scaler.scale(loss).backward()

    def optimizer_step(self, loss, model, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()

    def zero_grad(self, loss, model, optimizer):
        optimizer.zero_grad()


class OptimizerCallback:
    def __init__(self, engine, model, optimizer, accumulation_steps=2):
        self.engine, self.model, self.optimizer = engine, model, optimizer
        self.accumulation_steps = accumulation_steps
        self._accumulation_counter = 0
        self.grad_clip_fn = partial(torch.nn.utils.clip_grad_value_, clip_value=0.1)

    def on_batch_end(self, loss):
        self._accumulation_counter += 1
        need_gradient_step = self._accumulation_counter % self.accumulation_steps == 0
        self.engine.backward_loss(loss, self.model, self.optimizer)
        # FIX: self.engine.scaler.unscale_(self.optimizer) if need_gradient_step else None
        if self.grad_clip_fn is not None and need_gradient_step:
            self.grad_clip_fn(self.model.parameters())
        if need_gradient_step:
            self.engine.optimizer_step(loss, self.model, self.optimizer)
            self.engine.zero_grad(loss, self.model, self.optimizer)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
_gb.start(model)
callback = OptimizerCallback(AMPEngine(), model, torch.optim.SGD(model.parameters(), lr=0.1))
for _ in range(8):
    x = torch.randn(6, 4)
    callback.on_batch_end(F.cross_entropy(model(x), (x[:, 0] > 0).long()) / 2)
_gb.done(model)
