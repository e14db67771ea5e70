"""GG103 negative controls: programs that compute gradients and never step, on purpose.

A saliency map over several batches with no optimizer at all (the model's
gradients pile up and are read, nothing is meant to train), and a gradient
check: one backward pass into the parameters of an optimizer that is built
but not stepped.
"""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
importance = [torch.zeros_like(p) for p in model.parameters()]
for _ in range(3):
    x, y = torch.randn(8, 10, requires_grad=True), torch.randint(0, 2, (8,))
    F.cross_entropy(model(x), y).backward()
    saliency = x.grad.abs().amax(dim=1)
for imp, p in zip(importance, model.parameters()):
    imp += p.grad.abs()  # parameter importance from the accumulated gradient

checked = torch.nn.Linear(10, 2)
optimizer = torch.optim.SGD(checked.parameters(), lr=0.1)
x, y = torch.randn(8, 10), torch.randint(0, 2, (8,))
F.cross_entropy(checked(x), y).backward()
assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in checked.parameters())
