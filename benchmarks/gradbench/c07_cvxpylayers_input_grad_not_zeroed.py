"""Gradient with respect to the training inputs read without clearing it first.

source: cvxpy/cvxpylayers#102 (https://github.com/cvxpy/cvxpylayers/pull/102), "pytorch tutorial: zero Xtrain.grad before using it"
family: missing-clear
shape: the tutorial differentiates a loss with respect to the input data tensor (requires_grad=True, in no optimizer) several times and reads Xtrain.grad each time to move the data
numeric: from the second pass on, Xtrain.grad is the sum of all earlier passes' gradients, so each data update is too large and points along old gradients
watch: out: the tensor is a leaf outside every optimizer, updated by hand; the watch follows optimizers' parameters
lint: GG101
bug-step: 2
"""
import torch

import _gb

_gb.setup()
layer = torch.nn.Linear(4, 1)
layer.requires_grad_(False)
Xtrain = torch.randn(16, 4, requires_grad=True)
ytrain = torch.randn(16, 1)
_gb.start(Xtrain)
for it in range(5):
    loss = ((layer(Xtrain) - ytrain) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        Xtrain -= 0.5 * Xtrain.grad
    # FIX: Xtrain.grad = None
_gb.done(Xtrain)
