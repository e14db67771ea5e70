"""GG202: a running mean kept in a buffer is updated in forward from the batch mean, which carries the
autograd graph: every step's graph stays chained in the buffer. `gradguard run` reports GG202 once; the
linter reports the update's line."""
import torch


class RunningNorm(torch.nn.Module):
    def __init__(self, n, momentum=0.1):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("mean", torch.zeros(n))

    def forward(self, x):
        m = self.momentum
        self.mean = (1 - m) * self.mean + m * x.mean(0)  # expect: GG202
        return x - self.mean.detach()


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), RunningNorm(8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    x, y = torch.randn(5, 6), torch.randn(5, 1)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
