"""GG108: backward(create_graph=True) outside a higher-order pattern."""
import torch


def gradient_penalty_through_grad(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward(create_graph=True)  # expect: GG108
        penalty = sum(p.grad.pow(2).sum() for p in model.parameters())
        penalty.backward()
        optimizer.step()


# --- correct: no finding -------------------------------------------------------
def hessian_vector_product(loss, params, v):
    grads = torch.autograd.grad(loss, params, create_graph=True)
    dot = sum((g * u).sum() for g, u in zip(grads, v))
    dot.backward(create_graph=True)
    return [p.grad for p in params]


def plain(model, x, y, loss_fn):
    loss_fn(model(x), y).backward(create_graph=False)
