"""Trust-region optimizer computing Hessian-vector products with backward(create_graph=True).

source: pytorch/pytorch#78622 (https://github.com/pytorch/pytorch/issues/78622), "backward(create_graph=True) causes a warning for potential memory leak" (torch-trust-ncg's TrustRegion closure)
family: create-graph
shape: the closure calls loss.backward(create_graph=True) so that the optimizer can differentiate p.grad again for Hessian-vector products; nothing sets .grad to None afterwards
numeric: each parameter's .grad keeps its graph (and the parameter through it) alive from step to step
watch: GG108
lint: GG108
bug-step: 1
"""
import torch

import _gb


def hvp_step(params, lr):
    grads = [p.grad for p in params]
    vec = [g.detach() for g in grads]
    hv = torch.autograd.grad(grads, params, grad_outputs=vec, retain_graph=False)
    with torch.no_grad():
        for p, g, h in zip(params, vec, hv):
            p -= lr * (g - 0.01 * h)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
params = list(model.parameters())
_gb.start(model)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for it in range(5):
    for p in params:
        p.grad = None
    loss = ((model(x) - y) ** 2).mean()
    loss.backward(create_graph=True)  # BUG
    hvp_step(params, lr=0.05)  # BUG
    # FIX: grads = torch.autograd.grad(loss, params, create_graph=True)
    # FIX: hv = torch.autograd.grad(grads, params, grad_outputs=[g.detach() for g in grads])
    # FIX: with torch.no_grad():
    # FIX:     for p, g, h in zip(params, grads, hv):
    # FIX:         p -= 0.05 * (g.detach() - 0.01 * h)
_gb.done(model)
