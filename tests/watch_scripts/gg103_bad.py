"""GG103: 10 micro-batches, windows of 4: the last 2 are never applied."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
accum = 4
for i in range(10):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    loss = F.mse_loss(model(x), y) / accum
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
# BUG: no step for the final partial window
