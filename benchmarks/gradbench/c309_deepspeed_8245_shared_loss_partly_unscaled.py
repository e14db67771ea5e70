"""DeepSpeed with gradient accumulation: the engine divides the gradient by the accumulation count in a backward hook on the engine's output, so a loss that combines a forward through the engine with a forward through the model inside the engine (`engine.module`) gets only the first path's gradient divided, and the parameters reached through the second path accumulate it unscaled.

source: deepspeedai/DeepSpeed#8245 (https://github.com/deepspeedai/DeepSpeed/pull/8245), "Fix shared loss gradient accumulation" (fixes #8224, merged): "With gradient accumulation enabled, a loss can combine a forward pass through the DeepSpeed engine with a forward pass through the model inside the engine. The engine-output hook divides only the gradient from the engine forward by the accumulation count. The gradient from the forward pass on the model inside the engine remains unscaled, producing an incorrect gradient for that parameter." The fix applies the scaling to the complete loss passed through engine.backward and marks the graph so the output hooks do not scale again. The engine is written out (forward with the output hook, backward, and a step that applies the optimizer every gradient_accumulation_steps micro-steps), the model an MLP; the loss is a regression loss through the engine plus a consistency term through engine.module on a second view of the input. The twin scales the whole loss in backward instead, as the fix does
family: unscaled
shape: SGD(lr=0.05), gradient_accumulation_steps = 4, 3 optimizer steps on micro-batches of 16
numeric: the consistency term's gradient enters every window 4 times too large (unscaled), the regression term's at its mean
watch: GG104
lint: out: the division happens in a backward hook registered on the engine's output inside the engine, not in the loop's text
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Engine:
    def __init__(self, module, optimizer, gradient_accumulation_steps):
        self.module, self.optimizer, self.gas, self.micro_steps = module, optimizer, gradient_accumulation_steps, 0

    def __call__(self, x):
        out = self.module(x)
        out.register_hook(lambda grad: grad / self.gas)  # BUG
        return out

    def backward(self, loss):
        # FIX: loss = loss / self.gas
        loss.backward()

    def step(self):
        self.micro_steps += 1
        if self.micro_steps % self.gas == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
_gb.start(model)
engine = Engine(model, torch.optim.SGD(model.parameters(), lr=0.05), gradient_accumulation_steps=4)
for micro_step in range(12):
    x, y = torch.randn(16, 10), torch.randn(16, 1)
    pred = engine(x)
    pred_view = engine.module(x + 0.1 * torch.randn_like(x))
    loss = F.mse_loss(pred, y) + 0.5 * F.mse_loss(pred_view, pred.detach())
    engine.backward(loss)
    engine.step()
_gb.done(model)
