"""dora-from-scratch's LoRA/DoRA notebook: the DoRA model is trained with `torch.optim.Adam(model_lora.parameters(), ...)`, the optimizer of the LoRA model, so the DoRA model's backward fills its gradients but its own weights are never updated (nor cleared: the optimizer's zero_grad clears the LoRA model's), while the step changes nothing.

source: rasbt/dora-from-scratch#1 (https://github.com/rasbt/dora-from-scratch/pull/1), "Update lora-dora-mlp.ipynb" (merged): "torch.optim.Adam(model_lora.parameters()) -> torch.optim.Adam(model_dora.parameters())". The author (rasbt): "omg how did I miss that. This explains why I got some weird results ...". The notebook was not read beyond the pull request: the MLP is reduced to two layers; LinearWithLoRA and LinearWithDoRA follow the DoRA method (frozen base weight, low-rank A and B with B = 0 at start, a learned magnitude m times the column-normalised direction), with the base layers frozen in both models as the notebook does before training the adapters. The twin builds the optimizer on model_dora.parameters(), the fix
family: wrong-optimizer
shape: Adam(lr=5e-3); 6 steps on batches of 16
numeric: the DoRA model's adapters and magnitudes never move
watch: GG106
lint: out: which model an optimizer should be built on is the program's intent
bug-step: 1
"""
import copy

import torch
import torch.nn.functional as F

import _gb


class LoRALayer(torch.nn.Module):
    def __init__(self, in_dim, out_dim, rank, alpha):
        super().__init__()
        self.A = torch.nn.Parameter(torch.randn(in_dim, rank) / rank ** 0.5)
        self.B = torch.nn.Parameter(torch.zeros(rank, out_dim))
        self.alpha = alpha

    def forward(self, x):
        return self.alpha * (x @ self.A @ self.B)


class LinearWithLoRA(torch.nn.Module):
    def __init__(self, linear, rank=4, alpha=8):
        super().__init__()
        self.linear = linear
        self.lora = LoRALayer(linear.in_features, linear.out_features, rank, alpha)

    def forward(self, x):
        return self.linear(x) + self.lora(x)


class LinearWithDoRA(torch.nn.Module):
    def __init__(self, linear, rank=4, alpha=8):
        super().__init__()
        self.linear = linear
        self.lora = LoRALayer(linear.in_features, linear.out_features, rank, alpha)
        self.m = torch.nn.Parameter(self.linear.weight.norm(p=2, dim=0, keepdim=True).detach().clone())

    def forward(self, x):
        lora = self.lora.A @ self.lora.B
        combined = self.linear.weight + self.lora.alpha * lora.T
        directional = combined / combined.norm(p=2, dim=0, keepdim=True)
        return F.linear(x, self.m * directional, self.linear.bias)


_gb.setup()
base = torch.nn.Sequential(torch.nn.Linear(10, 24), torch.nn.ReLU(), torch.nn.Linear(24, 3))
base.requires_grad_(False)
model_lora = torch.nn.Sequential(LinearWithLoRA(copy.deepcopy(base[0])), torch.nn.ReLU(), LinearWithLoRA(copy.deepcopy(base[2])))
model_dora = torch.nn.Sequential(LinearWithDoRA(copy.deepcopy(base[0])), torch.nn.ReLU(), LinearWithDoRA(copy.deepcopy(base[2])))
_gb.start(model_dora)
optimizer_dora = torch.optim.Adam(model_lora.parameters(), lr=5e-3)  # BUG
# FIX: optimizer_dora = torch.optim.Adam(model_dora.parameters(), lr=5e-3)
data = [(torch.randn(16, 10), torch.randint(0, 3, (16,))) for _ in range(6)]
for features, targets in data:
    loss = F.cross_entropy(model_dora(features), targets)
    optimizer_dora.zero_grad()
    loss.backward()
    optimizer_dora.step()
_gb.done(model_dora)
