"""SparseML TrainableParamsModifier: requires_grad = False is applied inside optimizer.step(), after the backward pass already gave the parameters a gradient, so the "frozen" parameters are updated.

source: neuralmagic/sparseml#965 (https://github.com/neuralmagic/sparseml/issues/965), label bug, "TrainableParamsModifier doesn't freeze params": "This happens because the TrainableParamsModifier is called for the first time to set requires_grad=False in the optimizer.step() call, but at this point it's already late to set it. The forward-backward pass happened and the PyTorch autograd recorded all these params ... and attached .grad to them. This will be a signal for optimizer to optimize those params too." Expected: "To have these params frozen and not updated during the run." The twin applies the modifier before the first forward pass. Gradients are cleared with zero_grad(set_to_none=False), PyTorch 1.x's default when the issue was filed
family: frozen-not-frozen
shape: manager = ScheduledModifierManager([TrainableParamsModifier(params=[...], trainable=False, start_epoch=0)]); optimizer = manager.modify(model, optimizer, steps_per_epoch) (a ScheduledOptimizer whose step() first calls manager.update(...), which applies due modifiers, then the wrapped optimizer's step); for batch: optimizer.zero_grad(); loss = model(batch); loss.backward(); optimizer.step()
numeric: the frozen layer takes a full step with its first gradient and then keeps moving with Adam's momentum on zero-filled gradients
watch: GG107
lint: out: the freeze happens inside a library's step at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class TrainableParamsModifier:
    def __init__(self, params, trainable, start_epoch=0.0):
        self.params, self.trainable, self.start_epoch = params, trainable, start_epoch
        self.applied = False

    def update(self, module, epoch):
        if not self.applied and epoch >= self.start_epoch:
            for name, param in module.named_parameters():
                if any(name.startswith(p) for p in self.params):
                    param.requires_grad = self.trainable
            self.applied = True


class ScheduledModifierManager:
    def __init__(self, modifiers):
        self.modifiers = modifiers

    def initialize(self, module, epoch=0.0):
        for modifier in self.modifiers:
            modifier.update(module, epoch)

    def update(self, module, epoch):
        for modifier in self.modifiers:
            modifier.update(module, epoch)

    def modify(self, module, optimizer, steps_per_epoch):
        return ScheduledOptimizer(optimizer, module, self, steps_per_epoch)


class ScheduledOptimizer:
    def __init__(self, optimizer, module, manager, steps_per_epoch):
        self.optimizer, self.module, self.manager, self.steps_per_epoch = optimizer, module, manager, steps_per_epoch
        self.steps = 0

    def zero_grad(self, set_to_none=False):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self):
        self.manager.update(self.module, self.steps / self.steps_per_epoch)
        self.optimizer.step()
        self.steps += 1


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU(),
                            torch.nn.Linear(16, 3))
_gb.start(model)
manager = ScheduledModifierManager([TrainableParamsModifier(params=["0."], trainable=False, start_epoch=0.0)])
# FIX: manager.initialize(model)
optimizer = manager.modify(model, torch.optim.Adam(model.parameters(), lr=1e-3), steps_per_epoch=6)
data = [(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()) for x in (torch.randn(8, 10) for _ in range(6))]
for epoch in range(2):
    for x, y in data:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
_gb.done(model)
