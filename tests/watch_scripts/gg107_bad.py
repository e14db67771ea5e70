"""GG107: a conditionally used branch keeps a zero-filled .grad, and momentum keeps moving it."""
import torch
import torch.nn.functional as F


class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 1)
        self.b = torch.nn.Linear(8, 1)

    def forward(self, x, use_b):
        return self.a(x) + self.b(x) if use_b else self.a(x)


torch.manual_seed(0)
model = Router()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for i in range(4):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    optimizer.zero_grad(set_to_none=False)  # BUG: zeros, not None, for the unused branch
    F.mse_loss(model(x, use_b=(i == 0)), y).backward()
    optimizer.step()
