"""GREATS online batch selection with gradient accumulation: every micro-step first scores its candidate examples with `compute_GradProd_GC_per_iter`, which calls `optimizer.zero_grad()` before computing per-example gradient products, so the clear erases the gradients the earlier micro-batches of the window accumulated and each optimizer step applies only the window's last micro-batch (divided by the accumulation steps).

source: Jiachen-T-Wang/GREATS#6 (https://github.com/Jiachen-T-Wang/GREATS/issues/6), "GREATS method with gradient accumulation": "i noticed during GREATS selection in `compute_GradProd_GC_per_iter` function there is call to `optimizer.zero_grad()`. Will this not disrupt the gradient accumulation process?" (open, no answer: unconfirmed). The selection code was not read: the scoring function is written anew from the issue (clear the optimizer's gradients, then per-example gradient products against a validation gradient by torch.autograd.grad, which writes no .grad); the language model is reduced to an MLP classifier; each micro-step keeps the 8 best-scored of 16 candidates. The twin scores without the clear
family: misplaced-clear
shape: AdamW(lr=1e-3), gradient_accumulation_steps = 4, micro-batches of 8 selected from 16 candidates; 3 optimizer steps
numeric: every step applies 1 of its 4 micro-batches (divided by 4) instead of all 4
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


def compute_GradProd_GC_per_iter(model, optimizer, x, y, x_val, y_val):
    """Score each candidate by the product of its gradient with the validation gradient (GREATS' first-order term)."""
    optimizer.zero_grad()  # BUG
    params = [p for p in model.parameters() if p.requires_grad]
    g_val = torch.autograd.grad(F.cross_entropy(model(x_val), y_val), params)
    scores = []
    for i in range(x.shape[0]):
        g_i = torch.autograd.grad(F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]), params)
        scores.append(sum((a * b).sum() for a, b in zip(g_i, g_val)))
    return torch.stack(scores).detach()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 4))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
accumulation_steps = 4
x_val, y_val = torch.randn(32, 12), torch.randint(0, 4, (32,))
batches = [(torch.randn(16, 12), torch.randint(0, 4, (16,))) for _ in range(12)]
for step, (x, y) in enumerate(batches):
    scores = compute_GradProd_GC_per_iter(model, optimizer, x, y, x_val, y_val)
    keep = scores.topk(8).indices
    loss = F.cross_entropy(model(x[keep]), y[keep]) / accumulation_steps
    loss.backward()
    if (step + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
