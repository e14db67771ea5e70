"""VariationalRecurrentNeuralNetwork train.py: the gradient norm is clipped after `optimizer.step()`, so every update uses the unclipped gradient.

source: emited/VariationalRecurrentNeuralNetwork#3 (https://github.com/emited/VariationalRecurrentNeuralNetwork/issues/3), "grad_norm (line 32) should be before optimizer.step() (line 35)": "Or am I wrong?"; the author (emited): "You are right again !" Code read (train.py): optimizer.zero_grad(); kld_loss, nll_loss, _, _ = model(data); loss = kld_loss + nll_loss; loss.backward(); optimizer.step(); nn.utils.clip_grad_norm(model.parameters(), clip), with clip = 10 and Adam(lr=1e-3). The VRNN is reduced to a GRU cell with a Gaussian encoder and a Bernoulli decoder (KL and negative log-likelihood summed over time and batch, as the repository's model does). The twin clips between backward and step
family: clip-misplaced
shape: for batch_idx, (data, _) in enumerate(train_loader): data = data.squeeze().transpose(0, 1); optimizer.zero_grad(); kld_loss, nll_loss, _, _ = model(data); loss = kld_loss + nll_loss; loss.backward(); optimizer.step(); nn.utils.clip_grad_norm_(model.parameters(), clip). 6 batches of 8 sequences of 5 steps
numeric: every update uses the unclipped gradient (its norm is far above clip = 10 with losses summed over the batch)
watch: GG116
lint: GG116
bug-step: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import _gb


class VRNN(nn.Module):
    def __init__(self, x_dim=12, h_dim=16, z_dim=4):
        super().__init__()
        self.enc = nn.Linear(x_dim + h_dim, 2 * z_dim)
        self.prior = nn.Linear(h_dim, 2 * z_dim)
        self.dec = nn.Linear(z_dim + h_dim, x_dim)
        self.rnn = nn.GRUCell(x_dim + z_dim, h_dim)
        self.h_dim = h_dim

    def forward(self, x):
        h = torch.zeros(x.size(1), self.h_dim)
        kld_loss, nll_loss = 0, 0
        for t in range(x.size(0)):
            enc_mean, enc_logvar = self.enc(torch.cat([x[t], h], 1)).chunk(2, 1)
            prior_mean, prior_logvar = self.prior(h).chunk(2, 1)
            z_t = enc_mean + torch.exp(0.5 * enc_logvar) * torch.randn_like(enc_mean)
            dec_logits = self.dec(torch.cat([z_t, h], 1))
            h = self.rnn(torch.cat([x[t], z_t], 1), h)
            kld_loss = kld_loss + 0.5 * torch.sum(prior_logvar - enc_logvar
                                                  + (enc_logvar.exp() + (enc_mean - prior_mean) ** 2) / prior_logvar.exp() - 1)
            nll_loss = nll_loss + F.binary_cross_entropy_with_logits(dec_logits, x[t], reduction="sum")
        return kld_loss, nll_loss, None, None


_gb.setup()
model = VRNN()
_gb.start(model)
clip = 10
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
train_loader = [((torch.rand(8, 1, 5, 12) > 0.5).to(torch.get_default_dtype()), None) for _ in range(6)]
for epoch in range(1, 3):
    for batch_idx, (data, _) in enumerate(train_loader):
        data = data.squeeze().transpose(0, 1)
        optimizer.zero_grad()
        kld_loss, nll_loss, _, _ = model(data)
        loss = kld_loss + nll_loss
        loss.backward()
        # FIX: nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        nn.utils.clip_grad_norm_(model.parameters(), clip)  # BUG
_gb.done(model)
