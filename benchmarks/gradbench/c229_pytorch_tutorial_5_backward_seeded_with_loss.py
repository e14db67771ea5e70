"""sotte/pytorch_tutorial, the linear-regression example of `01_pytorch_basics.ipynb`: the training loop calls `loss.backward(loss)`, passing the loss itself as the `gradient` argument, so backpropagation starts from the loss value instead of 1 and every step's gradient is multiplied by that step's loss: large-loss steps move the weights far more than the learning rate says, and the scale shrinks as the loss falls.

source: sotte/pytorch_tutorial#5 (https://github.com/sotte/pytorch_tutorial/issues/5), "Why `loss.backward(loss)` in the Linear Regression example training": "why you put the `loss` back in as the gradient for the `backward` method ... Is this just an error?" The author (sotte): "Ups, that should not be there! Sorry for the confusion and thanks a lot for finding that. Fixed it." The notebook was not read: the example is written as a one-feature linear regression with MSE loss and SGD, the usual form of such tutorials. The twin calls loss.backward(), the author's fix
family: seeded-backward
shape: SGD(lr=0.01); 30 full-batch steps on 32 points
numeric: every gradient is scaled by the current loss (several units at the start, below 1 later)
watch: out: the seed of the backward pass scales the whole gradient; the buffers receive one pass per step, applied once and cleared
lint: out: the backward's gradient argument is a tensor expression; which seed a loss should get is not a gradient-buffer rule
bug-step: 1
"""
import torch

import _gb

_gb.setup()
x = torch.rand(32, 1) * 2
y = 3 * x - 1 + 0.2 * torch.randn(32, 1)
model = torch.nn.Linear(1, 1)
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
criterion = torch.nn.MSELoss()
for step in range(30):
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward(loss)  # BUG
    # FIX: loss.backward()
    optimizer.step()
_gb.done(model)
