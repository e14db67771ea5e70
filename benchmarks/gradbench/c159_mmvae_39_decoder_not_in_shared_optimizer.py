"""MMVAE: the optimizer of the shared VAE is given only the parameters of its encoder, so the shared decoder receives gradients from the reconstruction loss on every step but is never updated (and its `.grad` grows without being cleared).

source: zdebruine/MMVAE#39 (https://github.com/zdebruine/MMVAE/issues/39), "Shared VAE Optimizer Only Given Encoder Parameters" (closed): "The optimizer for the shared VAE potion of the model is only being given the parameters of the encoder portion and not both the encoder & decoder portions." The code was not read: the multi-modal VAE is reduced to one expert encoder/decoder pair around a shared VAE (encoder to mu/logvar, decoder back), each with its own Adam as the issue describes; the twin builds the shared optimizer on the shared VAE's encoder and decoder
family: orphan
shape: expert Adam(lr=1e-3) on the expert encoder and decoder, shared Adam(lr=1e-3) on the shared encoder (bug) or encoder + decoder (twin); 6 steps, each zero_grad both, backward, step both
numeric: the shared decoder's update is 0 instead of Adam's steps
watch: GG106
lint: GG106
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class SharedVAE(torch.nn.Module):
    def __init__(self, d=16, z=4):
        super().__init__()
        self.encoder = torch.nn.Linear(d, 2 * z)
        self.decoder = torch.nn.Linear(z, d)

    def forward(self, h):
        mu, logvar = self.encoder(h).chunk(2, -1)
        zs = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.decoder(zs), mu, logvar


_gb.setup()
expert_encoder, expert_decoder = torch.nn.Linear(20, 16), torch.nn.Linear(16, 20)
shared = SharedVAE()
_gb.start(expert_encoder, expert_decoder, shared)
expert_optimizer = torch.optim.Adam(list(expert_encoder.parameters()) + list(expert_decoder.parameters()), lr=1e-3)
shared_optimizer = torch.optim.Adam(shared.encoder.parameters(), lr=1e-3)  # BUG
# FIX: shared_optimizer = torch.optim.Adam(list(shared.encoder.parameters()) + list(shared.decoder.parameters()), lr=1e-3)
for step in range(6):
    x = torch.randn(32, 20)
    expert_optimizer.zero_grad()
    shared_optimizer.zero_grad()
    h, mu, logvar = shared(torch.relu(expert_encoder(x)))
    recon = expert_decoder(torch.relu(h))
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(-1).mean()
    loss = F.mse_loss(recon, x) + 0.1 * kl
    loss.backward()
    expert_optimizer.step()
    shared_optimizer.step()
_gb.done(expert_encoder, expert_decoder, shared)
