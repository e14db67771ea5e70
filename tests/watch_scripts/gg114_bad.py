"""GG114: a backward pass before the loop (a check against a reference) left in the first step's gradient."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 8), torch.randn(16, 1)
loss = F.mse_loss(model(x), y)
loss.backward()  # BUG: the check's gradient is never cleared
first_grad_norm = float(torch.cat([p.grad.flatten() for p in model.parameters()]).norm())
for step in range(4):
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
