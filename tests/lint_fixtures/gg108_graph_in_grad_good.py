"""GG108: correct code of the same shapes (no finding expected)."""
import torch


def hessian_vector_product(loss, params, v):
    grads = torch.autograd.grad(loss, params, create_graph=True)
    dot = sum((g * u).sum() for g, u in zip(grads, v))
    dot.backward(create_graph=True)
    return [p.grad for p in params]


def plain(model, x, y, loss_fn):
    loss_fn(model(x), y).backward(create_graph=False)


net = torch.nn.Linear(4, 1)
inputs, targets = torch.randn(8, 4), torch.randn(8, 1)
for it in range(3):
    loss = ((net(inputs) - targets) ** 2).mean()
    grads = torch.autograd.grad(loss, list(net.parameters()), create_graph=True)
    sum((g ** 2).sum() for g in grads).backward(create_graph=True)
    for p in net.parameters():
        p.grad = None
