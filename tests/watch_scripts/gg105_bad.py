"""GG105: token-level cross-entropy over micro-batches of different sizes, all weighted 1/accum."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 32))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
accum = 4
for i, n_tokens in enumerate([40, 12, 33, 7, 25, 25, 9, 30]):
    tokens = torch.randint(0, 32, (n_tokens,))
    targets = torch.randint(0, 32, (n_tokens,))
    loss = F.cross_entropy(model(tokens), targets)
    (loss / accum).backward()  # BUG: a mean over 40 tokens and one over 7 weigh the same
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
