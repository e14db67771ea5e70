"""NNCF symmetric quantizer range initialisation: the initialisation writes the collected range into the quantizer by assigning a new `nn.Parameter` for its scale, but it can run after the optimizer received the model's parameters, so the optimizer keeps stepping the old scale tensor while the quantizer uses the new one, which gets gradients that no step applies and no `zero_grad()` clears.

source: openvinotoolkit/nncf#327 (https://github.com/openvinotoolkit/nncf/pull/327), "Do not replace parameter during symmetric range init" (merged): "The initialization using the controller method may occur *after* the optimizer received the list of model's parameters, so replacing the parameter as a whole during such initialization will break the gradient updates." The quantizer code was not read: a symmetric fake quantizer with a learnable scale (straight-through rounding, 8 bits) wraps a linear layer's input; the range initialisation sets the scale to the maximum absolute value seen on one batch divided by 127, after the optimizer is built, as the description has it. The twin writes the value into the existing parameter in place (copy_ under no_grad), the fix
family: orphan
shape: SGD(lr=0.02, momentum=0.9); quantized linear 16-32 then linear 32-4; 8 steps on batches of 32
numeric: the scale in use never moves (the twin trains it), and its .grad sums every step's gradient
watch: GG106
lint: out: which tensor the optimizer holds after a parameter is replaced is run-time state
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class SymmetricQuantizer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        q = torch.clamp(x / self.scale, -127, 127)
        return (q + (q.round() - q).detach()) * self.scale

    def apply_init(self, min_values, max_values):
        new_scale = torch.maximum(min_values.abs(), max_values.abs()) / 127
        self.scale = torch.nn.Parameter(new_scale.reshape(1))  # BUG
        # FIX: with torch.no_grad():
        # FIX:     self.scale.copy_(new_scale.reshape(1))


_gb.setup()
model = torch.nn.Sequential(SymmetricQuantizer(), torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
data = [(3 * torch.randn(32, 16), torch.randint(0, 4, (32,))) for _ in range(8)]
with torch.no_grad():
    model[0].apply_init(data[0][0].min(), data[0][0].max())
_gb.start(model)
for x, y in data:
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
_gb.done(model)
