"""GG101: the loop never clears .grad, so every step reuses earlier gradients."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(4):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()  # BUG: .grad still holds every earlier batch
