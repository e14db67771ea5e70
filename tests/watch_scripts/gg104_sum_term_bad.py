"""GG104 on a loss with a sum-reduced term: reconstruction mean + l1 * activation sum, never divided by accum.

The sum term's gradient adds up across micro-batches as a sum over the window's
items should; the mean term's does not: it is accum times the window's mean.
So the mean term is unscaled accumulation whatever the sum term is.
"""
import torch

torch.manual_seed(0)
encoder, decoder = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
optimizer = torch.optim.SGD(list(encoder.parameters()) + list(decoder.parameters()), lr=0.01)
accum, l1 = 2, 1e-3
for i in range(6):
    acts = torch.randn(6, 8)
    c = torch.relu(encoder(acts))
    loss = ((decoder(c) - acts) ** 2).mean() + l1 * c.abs().sum()
    loss.backward()  # BUG: the mean term is not divided by accum
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
