"""open-rl's trainer with several LoRA adapters on one base model: `optim_step(A)` builds its parameter list from the parameters that require grad, which depend on whichever adapter is active, so after `forward_backward(B)` adapter A's optimizer steps adapter B's parameters, and A's own gradients are never applied.

source: gke-labs/open-rl#80 (https://github.com/gke-labs/open-rl/pull/80), "fix: optimizer adapter isolation" (merged): "requests can interleave like: forward_backward(A) forward_backward(B) optim_step(A). The bug was that optim_step(A) grabbed params with [p for p in self.peft_model.parameters() if p.requires_grad], but requires_grad depends on whichever adapter is currently active. So if B was active, A's optimizer could accidentally get B's params." src/server/trainer.py was not read beyond the PR; PEFT's set_adapter is reduced to toggling requires_grad on two rank-2 adapters over a frozen base layer, the per-adapter optimizer to SGD built at each optim_step. The twin caches each adapter's parameters when it is created and uses them in optim_step, the PR's fix
family: wrong-optimizer
shape: SGD(lr=0.1) per optim_step; 3 rounds of forward_backward(A), forward_backward(B), optim_step(A), optim_step(B)
numeric: adapter A is stepped with B's parameters' gradients and its own are never applied
watch: GG106
lint: out: which parameters require grad when the optimizer is built is decided by the adapter switch at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class MultiAdapterModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.base = torch.nn.Linear(6, 3)
        self.base.requires_grad_(False)
        self.adapters = torch.nn.ModuleDict({k: torch.nn.Sequential(torch.nn.Linear(6, 2, bias=False),
                                                                    torch.nn.Linear(2, 3, bias=False))
                                             for k in ("A", "B")})
        self.active = "A"

    def set_adapter(self, name):
        self.active = name
        for k, adapter in self.adapters.items():
            adapter.requires_grad_(k == name)

    def forward(self, x):
        return self.base(x) + self.adapters[self.active](x)


_gb.setup()
model = MultiAdapterModel()
_gb.start(model)
adapter_params = {}
for name in ("A", "B"):
    model.set_adapter(name)
    adapter_params[name] = [p for p in model.parameters() if p.requires_grad]
data = {name: (torch.randn(8, 6), torch.randint(0, 3, (8,))) for name in ("A", "B")}


def forward_backward(name):
    model.set_adapter(name)
    x, y = data[name]
    F.cross_entropy(model(x), y).backward()


def optim_step(name):
    params = [p for p in model.parameters() if p.requires_grad]  # BUG
    # FIX: model.set_adapter(name)
    # FIX: params = adapter_params[name]
    optimizer = torch.optim.SGD(params, lr=0.1)
    optimizer.step()
    optimizer.zero_grad()


for round_ in range(3):
    forward_backward("A")
    forward_backward("B")
    optim_step("A")
    optim_step("B")
_gb.done(model)
