"""KempnerForge Muon: the optimizer sends its non-matrix parameters (biases, norms, embeddings) to an inner `torch.optim.AdamW` that it steps itself but never registers in its own `param_groups`, so `Muon.zero_grad()` clears only the matrix half and the inner AdamW's gradients sum over every step.

source: KempnerInstitute/KempnerForge#182 (https://github.com/KempnerInstitute/KempnerForge/issues/182), "Muon never zeroes the gradients it delegates to its inner AdamW" (labelled bug, closed): "Muon splits its parameters at training/optimizer.py:508-511, inside _build_muon: anything _is_muon_eligible accepts goes to Muon, the rest to an internal torch.optim.AdamW. Only the Muon half is then registered with the base class: super().__init__(muon_params, defaults). torch.optim.Optimizer.zero_grad walks self.param_groups, which therefore holds only the Muon half. It has no way to know self._adam exists. Muon bridges that gap everywhere the delegation was written out by hand, and zero_grad is the one place it was not." The optimizer file was not read beyond the issue's quotes: the Muon update is reduced to momentum + a 5-step Newton-Schulz orthogonalisation of 2-D parameters, the model to a small MLP with LayerNorm. The twin adds the missing delegation (zero_grad also clears self._adam)
family: missing-clear
shape: Muon(lr=0.02, momentum=0.95) on the 2-D weights, inner AdamW(lr=1e-3) on biases and LayerNorm; 6 steps, each zero_grad, backward, step
numeric: from step 2 on, the AdamW half applies the sum of all earlier gradients
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


def newton_schulz(g, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (g.norm() + 1e-7)
    for _ in range(steps):
        m = x @ x.t()
        x = a * x + (b * m + c * m @ m) @ x
    return x


class Muon(torch.optim.Optimizer):
    def __init__(self, params, lr=0.02, momentum=0.95, adam_lr=1e-3):
        params = list(params)
        muon_params = [p for p in params if p.ndim == 2]
        adam_params = [p for p in params if p.ndim != 2]
        super().__init__(muon_params, dict(lr=lr, momentum=momentum))
        self._adam = torch.optim.AdamW(adam_params, lr=adam_lr, weight_decay=0.0)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(p.grad)
                p.add_(newton_schulz(buf), alpha=-group["lr"])
        self._adam.step()

    # FIX: def zero_grad(self, set_to_none=True):
    # FIX:     super().zero_grad(set_to_none=set_to_none)
    # FIX:     self._adam.zero_grad(set_to_none=set_to_none)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


_gb.setup()
model = Net()
_gb.start(model)
optimizer = Muon(model.parameters())
data = [(torch.randn(16, 8), torch.randint(0, 4, (16,))) for _ in range(6)]
for x, y in data:
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
_gb.done(model)
