"""BackPACK's DiagGGN second-order optimizer example: the training loop never zeroes the gradients, so `.grad` accumulates over all batches while the per-batch curvature (`diag_ggn_mc`, which BackPACK overwrites at each backward) is fresh; the update divides a running sum of gradients by one batch's curvature and the run diverges.

source: f-dangel/backpack#95 (https://github.com/f-dangel/backpack/issues/95), "Bug in example for DiagGGN Second order optimizer" (label active, closed): "is missing the zero-ing of gradients. While backpack seems to overwrite iteratively on a `.backward()`, the gradient just accumulates here. I ran the example for several epochs which results in a divergence because the gradient is never reset"; a maintainer: "thanks for reporting that one!". The example's optimizer is kept (step: p -= lr * p.grad / (diag_ggn + damping)); BackPACK's DiagGGN-MC extension is replaced by the exact diagonal GGN of a linear least-squares model (the mean of x² per weight), which is what it estimates there, so the case runs without backpack. The twin calls model.zero_grad() before the forward, the issue's fix
family: missing-clear
shape: the example's DiagGGNOptimizer (lr 0.1, damping 1e-2) on a linear regression of 10 features, 8 batches of 16
numeric: step k divides the sum of k batches' gradients by one batch's curvature
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class DiagGGNOptimizer(torch.optim.Optimizer):
    def __init__(self, parameters, step_size, damping):
        super().__init__(parameters, dict(step_size=step_size, damping=damping))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                p -= group["step_size"] * p.grad / (p.diag_ggn_mc + group["damping"])


_gb.setup()
model = torch.nn.Linear(10, 1)
_gb.start(model)
optimizer = DiagGGNOptimizer(model.parameters(), step_size=0.1, damping=1e-2)
w_true = torch.randn(10, 1)
for batch_idx in range(8):
    x = torch.randn(16, 10)
    y = x @ w_true
    # FIX: model.zero_grad()
    outputs = model(x)
    loss = 0.5 * F.mse_loss(outputs, y, reduction="sum") / x.shape[0]
    loss.backward()
    with torch.no_grad():  # what BackPACK's DiagGGN extension fills in at this backward
        model.weight.diag_ggn_mc = (x ** 2).mean(0, keepdim=True)
        model.bias.diag_ggn_mc = torch.ones_like(model.bias)
    optimizer.step()
_gb.done(model)
