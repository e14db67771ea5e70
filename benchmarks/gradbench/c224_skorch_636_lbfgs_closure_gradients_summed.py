"""skorch 0.8's NeuralNet with `optimizer=torch.optim.LBFGS`: the `optimizer_.zero_grad()` that used to run inside `train_step_single` (the closure LBFGS calls) was moved into `train_step`, before `optimizer.step(closure)`, so the gradients are cleared once per step while LBFGS evaluates the closure several times: each evaluation's backward adds its gradient to the previous evaluations', and the line search and curvature pairs see sums of stale gradients.

source: skorch-dev/skorch#636 (https://github.com/skorch-dev/skorch/issues/636), "Issue with LBGFS optimizer: `optimizer_.zero_grad` no longer called inside of `train_step_single`" (labelled bug, closed): "in the following commit, the call to `optimizer_.zero_grad` was removed from `train_step_single`, and instead put inside of `train_step` ... this isn't appropriate if you're using the LBFGS optimizer -- for that optimizer you need to zero the gradient on every call to the closure" (nets that trained on 0.6 "now quickly hit `nan` loss on skorch 0.80"). The maintainer (BenjaminBossan): "You are right, the commit you identified is the reason for the trouble." skorch's NeuralNet was not read: `train_step` and `train_step_single` are written with the split the issue describes; the user's Weibull model is reduced to a two-layer regressor. The twin clears inside the closure, as before the commit
family: missing-clear
shape: LBFGS(lr=0.5, max_iter=5); 4 full-batch steps on 64 samples
numeric: every closure evaluation after the first in a step sees the sum of the step's earlier gradients
watch: GG101
lint: GG101
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
module = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
_gb.start(module)
optimizer_ = torch.optim.LBFGS(module.parameters(), lr=0.5, max_iter=5)
x = torch.randn(64, 6)
y = x[:, :1] * 2 - x[:, 1:2] + 0.1 * torch.randn(64, 1)


def train_step_single(xb, yb):
    # FIX: optimizer_.zero_grad()
    loss = F.mse_loss(module(xb), yb)
    loss.backward()
    return loss


def train_step(xb, yb):
    optimizer_.zero_grad()  # BUG

    def step_fn():
        return train_step_single(xb, yb)

    return optimizer_.step(step_fn)


for epoch in range(4):
    train_step(x, y)
_gb.done(module)
