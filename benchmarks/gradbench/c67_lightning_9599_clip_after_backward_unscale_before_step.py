"""Lightning native AMP (1.4.x): gradients clipped right after backward, unscaled only in the pre-optimizer-step hook.

source: Lightning-AI/pytorch-lightning#9599 (https://github.com/Lightning-AI/pytorch-lightning/issues/9599), "Clip norm after scaler.unscale_ in native fp16 training" (labels: bug / fix, Priority P0; fixed in release 1.4.9; duplicate report Lightning-AI/pytorch-lightning#9330)
family: clip-before-unscale
shape: the training loop's order under precision=16 with gradient_clip_val: precision_plugin.backward (scaler.scale(loss).backward()); clip_gradients (clip_grad_norm_) right after backward; pre_optimizer_step: scaler.unscale_(optimizer); then scaler.step(optimizer); scaler.update()
numeric: "the loss converged very slow": the gradient norm after clipping is about clip/65536
watch: GG112
lint: GG112
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class NativeMixedPrecisionPlugin:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cpu")

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def pre_optimizer_step(self, optimizer):
        self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()


class Loop:
    def __init__(self, model, optimizer, gradient_clip_val=1.0):
        self.model, self.optimizer, self.gradient_clip_val = model, optimizer, gradient_clip_val
        self.precision_plugin = NativeMixedPrecisionPlugin()

    def clip_gradients(self):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.gradient_clip_val)

    def run_batch(self, x, y):
        loss = F.cross_entropy(self.model(x), y)
        self.precision_plugin.backward(loss)
        self.clip_gradients()  # BUG
        self.precision_plugin.pre_optimizer_step(self.optimizer)
        # FIX: self.clip_gradients()
        self.precision_plugin.optimizer_step(self.optimizer)
        self.optimizer.zero_grad()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
_gb.start(model)
loop = Loop(model, torch.optim.SGD(model.parameters(), lr=0.1))
for _ in range(5):
    x = torch.randn(8, 8)
    loop.run_batch(x, x[:, :4].argmax(-1))
_gb.done(model)
