"""GG103: the accumulation counter restarts every epoch and an epoch is shorter than the window: no step ever runs."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Linear(10, 2)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
accum = 4
batches = [(torch.randn(8, 10), torch.randint(0, 2, (8,))) for _ in range(3)]
for epoch in range(2):
    for i, (x, y) in enumerate(batches):  # BUG: i restarts at 0 each epoch, 3 < accum
        loss = F.cross_entropy(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
