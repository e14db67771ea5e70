"""Gradient penalty via backward(create_graph=True): .grad keeps a graph that references the parameter.

source: pytorch/pytorch#7343 (https://github.com/pytorch/pytorch/issues/7343), "[memory leak] create_graph=True w/ custom grad": "the reference cycle is x -> x.grad -> x.grad.grad_fn -> x"; PyTorch now warns (pytorch/pytorch#4661)
family: create-graph
shape: loss.backward(create_graph=True) to get differentiable gradients, then a penalty on p.grad back-propagated, then a step; the gradients are cleared with zero_grad(set_to_none=False), which zeroes the values but keeps the graph-carrying tensors
numeric: each .grad carries an autograd graph (tanh saved activations) across steps
watch: GG108
lint: GG108
bug-step: 1
"""
import torch

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
_gb.start(model)
for step in range(5):
    x, y = torch.randn(8, 6), torch.randn(8, 1)
    optimizer.zero_grad(set_to_none=False)
    loss = ((model(x) - y) ** 2).mean()
    loss.backward(create_graph=True)  # BUG
    penalty = sum((p.grad ** 2).sum() for p in model.parameters())  # BUG
    # FIX: grads = torch.autograd.grad(loss, list(model.parameters()), create_graph=True)
    # FIX: penalty = sum((g ** 2).sum() for g in grads)
    # FIX: (loss + 0.1 * penalty).backward()
    (0.1 * penalty).backward()  # BUG
    optimizer.step()
_gb.done(model)
