"""GG108 by hand, fixed: torch.autograd.grad returns the differentiable gradient and leaves .grad alone.

Also a negative control: a gradient penalty made with backward(create_graph=True)
whose .grad is cleared before the clean backward that the hand-written update reads.
"""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
params = list(model.parameters())
x, y = torch.randn(16, 4), torch.randn(16, 1)
for it in range(3):
    loss = ((model(x) - y) ** 2).mean()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    hv = torch.autograd.grad(grads, params, grad_outputs=[g.detach() for g in grads])
    with torch.no_grad():
        for p, g, h in zip(params, grads, hv):
            p -= 0.05 * (g.detach() - 0.01 * h)

for it in range(3):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward(create_graph=True)
    penalty = sum(p.grad.pow(2).sum() for p in params)
    for p in params:
        p.grad = None  # the graph leaves .grad before anything reads it for an update
    (loss + 0.1 * penalty).backward()
    with torch.no_grad():
        for p in params:
            p -= 0.05 * p.grad
            p.grad = None
