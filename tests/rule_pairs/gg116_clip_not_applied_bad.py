"""GG116: the gradient clipped after `optimizer.step()`: the step already applied the unclipped gradient and
the next iteration clears what was clipped, so no update is ever clipped.
`gradguard run` reports GG116 once; the linter reports the clip line."""
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
    optimizer.step()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)  # expect: GG116
