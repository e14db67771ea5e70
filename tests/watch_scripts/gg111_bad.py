"""GG111: ten micro-batches in windows of four; the last window (two) is still divided by four."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
accum, n = 4, 10
for i in range(n):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    loss = F.mse_loss(model(x), y) / accum
    loss.backward()  # BUG: the final window has 2 micro-batches, not accum
    if (i + 1) % accum == 0 or i == n - 1:
        optimizer.step()
        optimizer.zero_grad()
