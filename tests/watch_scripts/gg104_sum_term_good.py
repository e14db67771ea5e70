"""GG104 on a loss with a sum-reduced term, fixed: the mean term divided by accum, the sum term summed as it is."""
import torch

torch.manual_seed(0)
encoder, decoder = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
optimizer = torch.optim.SGD(list(encoder.parameters()) + list(decoder.parameters()), lr=0.01)
accum, l1 = 2, 1e-3
for i in range(6):
    acts = torch.randn(6, 8)
    c = torch.relu(encoder(acts))
    loss = ((decoder(c) - acts) ** 2).mean() / accum + l1 * c.abs().sum()
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
