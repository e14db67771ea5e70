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


def penalty_with_a_comment_naming_autograd_grad(model, x, y, optimizer):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    # the fix would be: grads = torch.autograd.grad(loss, params, create_graph=True)
    loss.backward(create_graph=True)  # expect: GG108
    (0.1 * sum((p.grad ** 2).sum() for p in model.parameters())).backward()
    optimizer.step()


def hvp_from_grad(params, lr):
    """Differentiates the .grad that backward(create_graph=True) left on the parameters."""
    grads = [p.grad for p in params]
    hv = torch.autograd.grad(grads, params, grad_outputs=[g.detach() for g in grads])
    with torch.no_grad():
        for p, g, h in zip(params, grads, hv):
            p -= lr * (g - 0.01 * h)


net = torch.nn.Linear(4, 1)
inputs, targets = torch.randn(8, 4), torch.randn(8, 1)
for it in range(3):
    for p in net.parameters():
        p.grad = None
    ((net(inputs) - targets) ** 2).mean().backward(create_graph=True)  # expect: GG108
    hvp_from_grad(list(net.parameters()), 0.05)
