"""GG111 fixed: each micro-batch divided by the number of micro-batches its window really has."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
accum, n = 4, 10
for i in range(n):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    window = min(accum, n - (i // accum) * accum)
    loss = F.mse_loss(model(x), y) / window
    loss.backward()
    if (i + 1) % accum == 0 or i == n - 1:
        optimizer.step()
        optimizer.zero_grad()
