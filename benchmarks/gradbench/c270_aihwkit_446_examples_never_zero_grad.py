"""aihwkit's examples 01 and 02 (an analog layer trained with AnalogSGD): the training loop never calls `opt.zero_grad()`, so each step applies the sum of all earlier gradients and the loss first decreases, then increases again.

source: IBM/aihwkit#446 (https://github.com/IBM/aihwkit/issues/446), "Missing zero_grad() call" (label bug, closed): "It seems like the first two examples (`examples/01_simple_layer.py` and `examples/02_multiple_layers.py`) are missing a call to `opt.zero_grad()` at each iteration. When running on 10 iterations currently the loss decrease then increase again ... simply adding `opt.zero_grad()` after each `opt.step()` should be sufficient to solve this."; a maintainer: "you are right, many thanks". The example's data and sizes are kept (x = [[0.1, 0.2, 0.4, 0.3], [0.2, 0.1, 0.1, 0.3]], y = [[1.0, 0.5], [0.7, 0.3]], a 4->2 layer, lr 0.1, 10 iterations); the analog tile and AnalogSGD are reduced to nn.Linear and SGD (aihwkit is not installed). The twin adds opt.zero_grad() after each step, the issue's fix
family: missing-clear
shape: SGD(lr=0.1), a 4->2 linear layer, the same batch for 10 iterations
numeric: step k applies the sum of the k gradients so far
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
from torch.nn.functional import mse_loss

import _gb

_gb.setup()
x = torch.tensor([[0.1, 0.2, 0.4, 0.3], [0.2, 0.1, 0.1, 0.3]])
y = torch.tensor([[1.0, 0.5], [0.7, 0.3]])
model = torch.nn.Linear(4, 2)
_gb.start(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    pred = model(x)
    loss = mse_loss(pred, y)
    loss.backward()
    opt.step()
    # FIX: opt.zero_grad()
_gb.done(model)
