"""GG108 fixed: the penalty's gradient comes from torch.autograd.grad, .grad stays plain."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    grads = torch.autograd.grad(loss, list(model.parameters()), create_graph=True)
    penalty = sum(g.pow(2).sum() for g in grads)
    (loss + 0.1 * penalty).backward()
    optimizer.step()
