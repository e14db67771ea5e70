"""GG115: the same loop, fixed: the window's gradient is clipped once, after its last backward pass and
before the step. Neither `gradguard run` nor the linter reports anything."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
accumulation_steps = 4
data = [(torch.randn(5, 6), torch.randn(5, 1)) for _ in range(12)]

for i, (x, y) in enumerate(data):
    loss = torch.nn.functional.mse_loss(model(x), y) / accumulation_steps
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05)
        optimizer.step()
        optimizer.zero_grad()
