"""PyTorch Lightning's automatic optimization with `torch.optim.LBFGS`: the loop called `optimizer.zero_grad()` once per training step, outside the closure (`training_step_and_backward`) that LBFGS re-evaluates up to `max_iter` times, so each evaluation's backward pass adds its gradient to the earlier evaluations' and the model does not converge as the same model does in plain PyTorch.

source: Lightning-AI/pytorch-lightning#4083 (https://github.com/Lightning-AI/pytorch-lightning/issues/4083), "using LBFGS optimizer in pytorch lightening the model is not converging as compared to native pytoch + LBFGS" (bug / fix, P1, closed), fixed by PR #6147 "Call `optimizer.zero_grad()` before backward inside closure in AutoOpt", whose description reads: "Lightning calls `closure` 20 times and `zero_grad` only 1 time while PyTorch calls `closure` 20 times and `zero_grad` 20 times where 20 is the value of `torch.optim.LBFGS(..., max_iter=20)`". Lightning's loop is written out as plain PyTorch (a per-batch zero_grad, then optimizer.step(closure) with the training step and backward in the closure); the model is the issue's MLP classifier reduced to 16 features and 3 classes. The twin clears inside the closure, as PR #6147 does
family: missing-clear
shape: LBFGS(lr=0.5, max_iter=20), 4 batches of 64 samples, one optimizer step per batch
numeric: every closure evaluation after the first in a step sees the sum of that step's earlier gradients
watch: GG101
lint: GG101
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
_gb.start(model)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=20)
batches = [(torch.randn(64, 16), torch.randint(0, 3, (64,))) for _ in range(4)]


def training_step(batch):
    x, y = batch
    return F.nll_loss(torch.log_softmax(model(x), dim=1), y)


for batch in batches:
    optimizer.zero_grad()  # BUG

    def training_step_and_backward():
        # FIX: optimizer.zero_grad()
        loss = training_step(batch)
        loss.backward()
        return loss

    optimizer.step(training_step_and_backward)
_gb.done(model)
