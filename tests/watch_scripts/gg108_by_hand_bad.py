"""GG108 with an update written by hand: Hessian-vector products from .grad made by backward(create_graph=True).

No torch.optim step runs; .grad is set to None before each backward, yet each
update reads a .grad that holds an autograd graph (and keeps it alive).
"""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
params = list(model.parameters())
x, y = torch.randn(16, 4), torch.randn(16, 1)
for it in range(3):
    for p in params:
        p.grad = None
    loss = ((model(x) - y) ** 2).mean()
    loss.backward(create_graph=True)  # BUG: .grad now carries a graph
    grads = [p.grad for p in params]
    hv = torch.autograd.grad(grads, params, grad_outputs=[g.detach() for g in grads])
    with torch.no_grad():
        for p, g, h in zip(params, grads, hv):
            p -= 0.05 * (g - 0.01 * h)
