"""PyTorch Lightning's optimizer loop after #10167: the order became closure (training step and backward), `on_before_optimizer_step`, `optimizer.step()`, then the gradient-norm logging and `clip_gradients`, so the optimizer applied the unclipped gradients and the clip acted on gradients already applied (cleared before the next step): `gradient_clip_val` did nothing.

source: Lightning-AI/pytorch-lightning#10248 (https://github.com/Lightning-AI/pytorch-lightning/pull/10248), "Clip before step" (bug / fix, P0, merged): "Reorder: closure / on_before_optimizer_step / optimizer.step / log_grad_norm / clip_gradients into closure / on_before_optimizer_step / log_grad_norm / clip_gradients / optimizer.step" ("This bug is not on any release"). The loop is written out as plain PyTorch in the order the pull request lists (the closure, then the step, then the clip by norm at gradient_clip_val); the model is an MLP regressor on targets of large scale, so the clip binds. The twin clips before the step, as the fix does
family: clip-misplaced
shape: SGD(lr=0.01), gradient_clip_val = 0.5 (by norm), 8 steps on batches of 32
numeric: every update uses the unclipped gradient (norms well above 0.5)
watch: GG116
lint: GG116
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_clip_val = 0.5
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for batch_idx in range(8):
    x = torch.randn(32, 10)
    y = 5 * x[:, :1] - 3 * x[:, 1:2]

    def closure():
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        return loss

    loss = closure()
    # FIX: torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clip_val)
    optimizer.step()
    grad_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))  # log_grad_norm
    torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clip_val)  # BUG
_gb.done(model)
