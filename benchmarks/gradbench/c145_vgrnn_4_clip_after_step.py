"""VGRNN training examples: `nn.utils.clip_grad_norm(model.parameters(), clip)` is called after `optimizer.step()`, so every update uses the unclipped gradient and the clip edits a gradient the next `zero_grad()` discards.

source: VGraphRNN/VGRNN#4 (https://github.com/VGraphRNN/VGRNN/issues/4), "Incorrect use of torch.nn.utils.clip_grad_norm": "In both training examples clip_grad_norm() is called after opt.step() so it isn't doing anything. It should either be removed or moved before the optimizer updates the model components". The issue is closed without a reply on record. The code was not read beyond the issue: the loop follows the examples' order it describes (optimizer.zero_grad(); kld_loss, nll_loss, ... = model(...); loss = kld_loss + nll_loss; loss.backward(); optimizer.step(); nn.utils.clip_grad_norm(model.parameters(), clip)); the variational graph RNN is reduced to a recurrent variational encoder over node features of a small graph sequence with an inner-product adjacency decoder. The twin clips between backward and step
family: clip-misplaced
shape: Adam(lr=1e-2), clip = 10, 8 iterations over a sequence of 3 graph snapshots (6 nodes, features scaled so the gradient norm exceeds 10)
numeric: every update whose gradient norm exceeds 10 uses the unclipped gradient
watch: GG116
lint: GG116
bug-step: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import _gb


class VGRNN(nn.Module):
    def __init__(self, x_dim=5, h_dim=8, z_dim=4):
        super().__init__()
        self.enc = nn.Linear(x_dim + h_dim, 2 * z_dim)
        self.rnn = nn.GRUCell(x_dim + z_dim, h_dim)
        self.h_dim = h_dim

    def forward(self, xs, adjs):
        h = torch.zeros(xs[0].size(0), self.h_dim)
        kld_loss, nll_loss = 0, 0
        for x, adj in zip(xs, adjs):
            mu, logvar = self.enc(torch.cat([x, h], -1)).chunk(2, -1)
            z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
            nll_loss = nll_loss + F.binary_cross_entropy_with_logits(z @ z.t(), adj)
            kld_loss = kld_loss + 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).sum(-1).mean()
            h = self.rnn(torch.cat([x, z], -1), h)
        return kld_loss, nll_loss, h


_gb.setup()
model = VGRNN()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
clip = 10
x_in = [30 * torch.randn(6, 5) for _ in range(3)]
adj = [(torch.rand(6, 6) < 0.4).to(torch.get_default_dtype()) for _ in range(3)]
for k in range(8):
    optimizer.zero_grad()
    kld_loss, nll_loss, hidden_st = model(x_in, adj)
    loss = kld_loss + nll_loss
    loss.backward()
    # FIX: nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    nn.utils.clip_grad_norm_(model.parameters(), clip)  # BUG
_gb.done(model)
