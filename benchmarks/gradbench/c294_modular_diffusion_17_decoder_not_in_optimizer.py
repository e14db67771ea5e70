"""modular-diffusion's Model: the optimizer is built from `chain(self.data.parameters(), self.net.parameters())`, and `Data.parameters()` iterates `vars(self)`, the attribute names (strings), testing each for being an nn.Module, so it yields nothing; the Embedding data transform's table, which encodes the tokens (and decodes them by nearest neighbour) and receives gradients through the denoising loss, is never optimized.

source: cabralpinto/modular-diffusion#17 (https://github.com/cabralpinto/modular-diffusion/issues/17), "Decoder parameters" (open, no answer): "How shall we optimize the parameters in decoder? It seems the module only add encoder parameters to optimiser?". diffusion/__init__.py, base.py and data.py were read (the stored version): Model.__post_init__ builds Adam(chain(self.data.parameters(), self.net.parameters()), lr=1e-4); Data.parameters() is `chain.from_iterable(var.parameters() for var in vars(self) if isinstance(var, nn.Module))`; Embedding keeps one nn.Embedding used by encode and decode; train() encodes the batch with grad enabled. The report names a decoder; in the code read, the data transform's parameters (the embedding table that encodes and decodes) are what the optimizer misses, which is what the case follows. The schedule, noise and loss are reduced to a DDPM-style epsilon prediction with MSE over 4 time steps, the net to an MLP over the flattened embeddings. The twin iterates vars(self).values()
family: orphan
shape: Adam(lr=1e-3), a 12-token vocabulary embedded in 4 dimensions, sequences of 6 tokens, batch 8, 5 steps
numeric: the embedding table keeps its initial values in the bug
watch: GG106
lint: out: which tensors a parameters() method yields is decided by a generator over an object's attributes at run time
bug-step: 1
"""
from itertools import chain

import torch
import torch.nn.functional as F

import _gb


class Embedding:
    def __init__(self, count, dimension):
        self.embedding = torch.nn.Embedding(count, dimension)

    def parameters(self):
        return chain.from_iterable(var.parameters() for var in vars(self) if isinstance(var, torch.nn.Module))  # BUG
        # FIX: return chain.from_iterable(var.parameters() for var in vars(self).values() if isinstance(var, torch.nn.Module))

    def encode(self, w):
        return self.embedding(w)

    def decode(self, x):
        return torch.cdist(x, self.embedding.weight).argmin(-1)


_gb.setup()
steps = 4
alpha_bar = torch.cumprod(1 - torch.linspace(0.1, 0.4, steps), 0)
data = Embedding(12, 4)
net = torch.nn.Sequential(torch.nn.Linear(6 * 4 + 1, 64), torch.nn.ReLU(), torch.nn.Linear(64, 6 * 4))
_gb.start(data.embedding, net)
optimizer = torch.optim.Adam(chain(data.parameters(), net.parameters()), lr=1e-3)
for step in range(5):
    w = torch.randint(0, 12, (8, 6))
    x = data.encode(w).flatten(1)
    t = torch.randint(0, steps, (8,))
    epsilon = torch.randn_like(x)
    a = alpha_bar[t][:, None]
    z = a.sqrt() * x + (1 - a).sqrt() * epsilon
    hat = net(torch.cat([z, t[:, None].to(z.dtype) / steps], 1))
    loss = F.mse_loss(hat, epsilon)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(data.embedding, net)
