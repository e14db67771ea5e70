"""GG106: the head was left out of the optimizer; its .grad grows every step."""
import torch
import torch.nn.functional as F


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
        self.head = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.body(x))


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.body.parameters(), lr=0.01)  # BUG: model.head is missing
for _ in range(4):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    optimizer.zero_grad()
    F.mse_loss(model(x), y).backward()
    optimizer.step()
