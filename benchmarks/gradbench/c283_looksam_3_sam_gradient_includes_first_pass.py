"""LookSAM's training step: the gradients are not cleared between the first backward pass (at the current weights) and the second one at the perturbed weights, so the gradient the base optimizer applies is the sum of the two passes, not the SAM gradient.

source: rollovd/LookSAM#3 (https://github.com/rollovd/LookSAM/issues/3), the report that zero_grad is missing before the second (SAM) backward; the maintainer agreed ("makes sense") and later added a zero_sam_grad step. The LookSAM optimizer is reduced to plain SAM (every step is a SAM step: perturb by rho * g / |g|, second backward, restore, base step), the network to an MLP classifier, the base optimizer to SGD with momentum. The twin clears the gradients after the perturbation, before the second backward
family: leaked-pass
shape: SGD(lr=0.05, momentum 0.9) as base optimizer, rho 0.05, 5 steps of batches of 32
numeric: each step applies the first pass's gradient added to the perturbed one (about twice the SAM gradient)
watch: GG104
lint: out: the two backward passes of one SAM step and the perturbation between them are the optimizer's protocol, not an accumulation loop
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

rho = 0.05
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
_gb.start(model)
base_optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
params = list(model.parameters())
for step in range(5):
    x, y = torch.randn(32, 20), torch.randint(0, 4, (32,))
    base_optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    with torch.no_grad():
        grad_norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
        e_ws = [rho * p.grad / (grad_norm + 1e-12) for p in params]
        for p, e_w in zip(params, e_ws):
            p.add_(e_w)
    # FIX: base_optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    with torch.no_grad():
        for p, e_w in zip(params, e_ws):
            p.sub_(e_w)
    base_optimizer.step()
_gb.done(model)
