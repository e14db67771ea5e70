"""Muon (KellerJordan/Muon, muon.py): the optimizer's step gives every parameter without a gradient a zero gradient and still applies `p.mul_(1 - lr * weight_decay)` to it, so a frozen matrix (requires_grad off, left in the optimizer) shrinks at every step although no loss reaches it.

source: KellerJordan/Muon#54 (https://github.com/KellerJordan/Muon/issues/54), "optimizer applies weight decay to parameters even when their gradient is None" (open). Only the title was read; the step follows muon.py's single-device loop as published (for p in group["params"]: if p.grad is None: p.grad = torch.zeros_like(p); state["momentum_buffer"] ...; update = muon_update(p.grad, state["momentum_buffer"], beta=group["momentum"]); p.mul_(1 - group["lr"] * group["weight_decay"]); p.add_(update.reshape(p.shape), alpha=-group["lr"])), with the Newton-Schulz orthogonalisation of the momentum. The program freezes the first hidden matrix (a pretrained block kept fixed) after building the optimizer on all hidden matrices. The twin skips parameters without a gradient, the behaviour the title expects
family: frozen-not-frozen
shape: Muon(lr=0.02, momentum=0.95, weight_decay=0.1) on the two hidden matrices, Adam(lr=1e-3) on the rest; the first matrix frozen; 8 steps
numeric: the frozen matrix shrinks by (1 - 0.002) per step instead of staying fixed
watch: out: the frozen parameter's decay happens inside the optimizer's own step; nothing in the gradient buffers before the step differs
lint: out: which parameters an optimizer's step touches is the optimizer's code, not the training loop's
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


def zeropower_via_newtonschulz5(g, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (g.norm() + 1e-7)
    for _ in range(steps):
        m = x @ x.t()
        x = a * x + (b * m + c * m @ m) @ x
    return x


def muon_update(grad, momentum, beta=0.95):
    momentum.lerp_(grad, 1 - beta)
    update = grad.lerp_(momentum, beta)
    update = zeropower_via_newtonschulz5(update)
    return update * max(1, grad.size(-2) / grad.size(-1)) ** 0.5


class Muon(torch.optim.Optimizer):
    def __init__(self, params, lr=0.02, weight_decay=0.0, momentum=0.95):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    # FIX: continue
                    p.grad = torch.zeros_like(p)
                state = self.state[p]
                if len(state) == 0:
                    state["momentum_buffer"] = torch.zeros_like(p)
                update = muon_update(p.grad, state["momentum_buffer"], beta=group["momentum"])
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update.reshape(p.shape), alpha=-group["lr"])


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 24), torch.nn.ReLU(),
                            torch.nn.Linear(24, 5))
_gb.start(model)
hidden = [model[0].weight, model[2].weight]
others = [p for p in model.parameters() if all(p is not h for h in hidden)]
optimizers = [Muon(hidden, lr=0.02, weight_decay=0.1), torch.optim.Adam(others, lr=1e-3)]
model[0].weight.requires_grad_(False)
for step in range(8):
    x, y = torch.randn(32, 12), torch.randint(0, 5, (32,))
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    for opt in optimizers:
        opt.step()
    model.zero_grad(set_to_none=True)
_gb.done(model)
