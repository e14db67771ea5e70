"""Truxify's multi-task trainer (PCGrad): the conflict-resolution step runs on each parameter's `.grad` after a single `loss.backward()` of the summed task losses, so the buffers already hold the sum of all tasks' gradients; the per-task projection has one gradient per parameter to work on and changes nothing, and the model trains as if PCGrad were absent.

source: KanishJebaMathewM/Truxify#11390 (https://github.com/KanishJebaMathewM/Truxify/issues/11390), "ml/mtl: PCGrad runs on per-parameter grads after a single combined backward() — no-op / incorrect gradient": "With one shared `backward()`, the `.grad` buffers already contain the *summed* gradients of all tasks. PCGrad is then applied to individual parameter tensors that no longer correspond to a single task"; fixed by PR #11585: "For each task loss `L_t`: `g_t = torch.autograd.grad(L_t, params, retain_graph=True, allow_unused=True)` ... ran the existing `GradientSurgery.pcgrad` projection per parameter across tasks ... applied the projected, summed gradient exactly once via `optimizer.step()`". backend/ml/mtl/model.py was not read; the shared trunk with two heads and two regression tasks with opposed targets is made up. The twin takes each task's gradient with autograd.grad, projects per parameter and writes the sum to .grad, as the fix describes
family: per-task-gradients
shape: SGD(lr=0.05), a shared trunk and two task heads, two tasks with opposite targets and heads that start alike, 4 steps
numeric: the bug applies the plain sum of the task gradients; the twin removes each task's component along a conflicting task's gradient
watch: out: one backward pass per step, applied once and cleared; whether task gradients should be projected before they are summed is the algorithm's intent
lint: out: which gradient a projection receives is decided by the algorithm, not by where the buffers are cleared and stepped
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


def pcgrad(task_grads):
    """Project each task's gradient off the others it conflicts with, then sum (Yu et al., 2020)."""
    projected = [g.clone() for g in task_grads]
    for i, gi in enumerate(projected):
        for j, gj in enumerate(task_grads):
            if i != j:
                dot = (gi * gj).sum()
                if dot < 0:
                    gi -= dot / (gj * gj).sum().clamp_min(1e-12) * gj
    return sum(projected)


_gb.setup()
trunk = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh())
heads = torch.nn.ModuleList([torch.nn.Linear(16, 1), torch.nn.Linear(16, 1)])
heads[1].load_state_dict(heads[0].state_dict())  # the two task heads start alike
model = torch.nn.ModuleDict({"trunk": trunk, "heads": heads})
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
params = list(model.parameters())
for step in range(4):
    x = torch.randn(16, 8)
    targets = [x.sum(1, keepdim=True), -x.sum(1, keepdim=True)]
    h = trunk(x)
    task_losses = [F.mse_loss(head(h), t) for head, t in zip(heads, targets)]
    optimizer.zero_grad()
    sum(task_losses).backward()  # BUG
    for p in params:  # BUG
        p.grad = pcgrad([p.grad])  # BUG
    # FIX: per_task = [torch.autograd.grad(task_loss, params, retain_graph=t + 1 < len(task_losses), allow_unused=True) for t, task_loss in enumerate(task_losses)]
    # FIX: for k, p in enumerate(params):
    # FIX:     p.grad = pcgrad([g[k] if g[k] is not None else torch.zeros_like(p) for g in per_task])
    optimizer.step()
    del task_losses, h
_gb.done(model)
