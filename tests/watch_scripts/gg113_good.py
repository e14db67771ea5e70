"""GG113 fixed: each micro-batch divided by the window size once."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
accum = 4


def compute_loss(x, y):
    return F.mse_loss(model(x), y) / accum


for step in range(3):
    for micro in range(accum):
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        loss = compute_loss(x, y)
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
