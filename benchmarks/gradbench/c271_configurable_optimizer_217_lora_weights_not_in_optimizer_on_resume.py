"""ConfigurableOptimizer's LoRA training on resume: when a run is resumed from a checkpoint past the warm-up epochs, the LoRA weights are created after the optimizer was built and are not added to it, so they receive gradients but are never updated.

source: automl/ConfigurableOptimizer#217 (https://github.com/automl/ConfigurableOptimizer/pull/217), "Fix LoRA checkpoints" (merged): "Correct an issue where Lora weights were not added to the model optimizer during the checkpointing process." The trainer was not read beyond the PR description; the supernet is reduced to a linear layer whose LoRA adapter (A, B, rank 2) is attached on resume, after the optimizer over the model's parameters was built and its state loaded. The twin adds the LoRA weights to the optimizer as a new parameter group, the PR's fix
family: orphan
shape: SGD(lr=0.1, momentum=0.9); the base weight frozen, a rank-2 LoRA adapter attached at resume, 5 steps
numeric: the LoRA weights keep their initial values in the bug
watch: GG106
lint: out: which parameters the adapter creates is known only when it is attached at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class LoRALinear(torch.nn.Module):
    def __init__(self, base, rank=2):
        super().__init__()
        self.base = base
        self.lora_A = torch.nn.Parameter(torch.randn(rank, base.in_features) * 0.1)
        self.lora_B = torch.nn.Parameter(torch.randn(base.out_features, rank) * 0.1)

    def forward(self, x):
        return self.base(x) + x @ self.lora_A.t() @ self.lora_B.t()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
# resume past the warm-up epochs: the LoRA adapter is attached after the optimizer exists
model[2] = LoRALinear(model[2])
model[2].base.weight.requires_grad_(False)
# FIX: optimizer.add_param_group({"params": [model[2].lora_A, model[2].lora_B]})
_gb.start(model)
for step in range(5):
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
_gb.done(model)
