"""GG115: gradients clipped after every micro-batch's backward pass, while the accumulation window is
still open: the step applies the last micro-batch's gradient on top of a clipped partial sum.
`gradguard run` reports GG115 once; the linter reports the clip line."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
accumulation_steps = 4
data = [(torch.randn(5, 6), torch.randn(5, 1)) for _ in range(12)]

for i, (x, y) in enumerate(data):
    loss = torch.nn.functional.mse_loss(model(x), y) / accumulation_steps
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05)  # expect: GG115
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
