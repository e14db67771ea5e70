"""GG108: a gradient penalty via backward(create_graph=True) leaves graphs in .grad."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward(create_graph=True)  # BUG: .grad now carries a graph
    optimizer.step()
