"""GG105 fixed: each micro-batch mean weighted by its share of the window's tokens."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 32))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
accum = 4
sizes = [40, 12, 33, 7, 25, 25, 9, 30]
for i, n_tokens in enumerate(sizes):
    window = sizes[(i // accum) * accum:(i // accum + 1) * accum]
    tokens = torch.randint(0, 32, (n_tokens,))
    targets = torch.randint(0, 32, (n_tokens,))
    loss = F.cross_entropy(model(tokens), targets)
    (loss * (n_tokens / sum(window))).backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
