"""GG116: the same loop, fixed: the gradient is clipped after the backward pass and before the step that
applies it. Neither `gradguard run` nor the linter reports anything."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
max_grad_norm = 0.05
data = [(torch.randn(5, 6), torch.randn(5, 1)) for _ in range(6)]

for x, y in data:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    # the norm logged after the step, with an infinite threshold: a read, not a clip
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
