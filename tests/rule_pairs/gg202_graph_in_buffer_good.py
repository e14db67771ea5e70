"""GG202: the same model, fixed: the running mean is updated without the graph. Neither `gradguard run`
nor the linter reports anything."""
import torch


class RunningNorm(torch.nn.Module):
    def __init__(self, n, momentum=0.1):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("mean", torch.zeros(n))

    def forward(self, x):
        m = self.momentum
        with torch.no_grad():
            self.mean = (1 - m) * self.mean + m * x.mean(0)
        return x - self.mean.detach()


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), RunningNorm(8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    x, y = torch.randn(5, 6), torch.randn(5, 1)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
