"""GG102 fixed: clear after the step, not on every micro-batch."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
accum = 4
for i in range(12):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    loss = F.mse_loss(model(x), y) / accum
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
