"""LoRA trainer that forgot zero_grad after each optimizer step.

source: tenstorrent/tt-blacksmith#711 (https://github.com/tenstorrent/tt-blacksmith/pull/711), "[Trainer] Fix Bug Where Zero Grad was Left Out"
family: missing-clear
shape: only the low-rank adapter matrices are trainable (the base weight is frozen); the step helper takes a zero_grad flag that was left False
numeric: the adapter gradients of every earlier step are re-applied at each step
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class LoRALinear(torch.nn.Module):
    def __init__(self, d_in, d_out, rank):
        super().__init__()
        self.base = torch.nn.Linear(d_in, d_out)
        self.base.requires_grad_(False)
        self.lora_a = torch.nn.Parameter(torch.randn(rank, d_in) * 0.1)
        self.lora_b = torch.nn.Parameter(torch.randn(d_out, rank) * 0.1)

    def forward(self, x):
        return self.base(x) + x @ self.lora_a.t() @ self.lora_b.t()


def optimizer_step(optimizer, zero_grad):
    optimizer.step()
    if zero_grad:
        optimizer.zero_grad()


_gb.setup()
model = LoRALinear(10, 10, 2)
optimizer = torch.optim.SGD([model.lora_a, model.lora_b], lr=0.05)
_gb.start(model)
for step in range(6):
    x, y = torch.randn(8, 10), torch.randn(8, 10)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer_step(optimizer, zero_grad=False)  # BUG
    # FIX: optimizer_step(optimizer, zero_grad=True)
_gb.done(model)
