"""controlled-text-generation train_discriminator.py: `trainer_G` is built on the encoder's parameters and `trainer_E` on the decoder's, so the generator loss's step moves the encoder (with the encoder loss's gradient left from the last iteration) and the decoder is stepped with the generator and encoder losses summed.

source: wiseodd/controlled-text-generation#15 (https://github.com/wiseodd/controlled-text-generation/issues/15), "Bug in optimizer usage": "In train_discriminator.py, lines 78-79: trainer_G = optim.Adam(model.encoder_params, lr=lr); trainer_E = optim.Adam(model.decoder_params, lr=lr). Shouldn't the names be opposite?" The author (wiseodd): "Thanks! Not only does this is unintuitive, but also this is a bug. I have pushed the fix." The training loop was not read: it follows the script's structure as the issue and the paper it implements (Hu et al. 2017) describe: the generator (decoder) loss on sentences generated from the prior, backward, clip, trainer_G.step(), trainer_G.zero_grad(); then the VAE (encoder) loss, backward, clip, trainer_E.step(), trainer_E.zero_grad(). The sentence VAE is reduced to MLP encoder/decoder over bag-of-words vectors; the discriminator is frozen here. The twin builds each optimizer on its own module's parameters, as the fix does
family: wrong-optimizer
shape: trainer_G = Adam(model.encoder_params) (BUG; fix: decoder_params); trainer_E = Adam(model.decoder_params) (BUG; fix: encoder_params); per iteration: loss_G.backward(); clip_grad_norm_(model.decoder_params, 5); trainer_G.step(); trainer_G.zero_grad(); loss_E.backward(); clip_grad_norm_(model.encoder_params, 5); trainer_E.step(); trainer_E.zero_grad(). lr = 1e-3, 6 iterations
numeric: each loss trains the other module: the decoder takes the sum of both losses' gradients, the encoder a step of the last iteration's VAE gradient
watch: out: which optimizer should own which module is the program's intent; every gradient is applied once and cleared by the optimizer that owns it
lint: out: which module each optimizer should own is the program's intent
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class RNN_VAE(torch.nn.Module):
    def __init__(self, vocab=20, z_dim=6):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(vocab, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2 * z_dim))
        self.decoder = torch.nn.Sequential(torch.nn.Linear(z_dim, 16), torch.nn.Tanh(), torch.nn.Linear(16, vocab))
        self.discriminator = torch.nn.Linear(vocab, 1)
        self.z_dim = z_dim
        self.encoder_params = list(self.encoder.parameters())
        self.decoder_params = list(self.decoder.parameters())

    def forward(self, x):
        mu, logvar = self.encoder(x).chunk(2, -1)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        recon = self.decoder(z)
        recon_loss = F.binary_cross_entropy_with_logits(recon, x)
        kl_loss = 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).sum(-1).mean()
        return recon_loss, kl_loss

    def generate(self, n):
        return torch.sigmoid(self.decoder(torch.randn(n, self.z_dim)))


_gb.setup()
model = RNN_VAE()
for p in model.discriminator.parameters():
    p.requires_grad_(False)
_gb.start(model.encoder, model.decoder)
lr = 1e-3
trainer_G = torch.optim.Adam(model.encoder_params, lr=lr)  # BUG
trainer_E = torch.optim.Adam(model.decoder_params, lr=lr)  # BUG
# FIX: trainer_G = torch.optim.Adam(model.decoder_params, lr=lr)
# FIX: trainer_E = torch.optim.Adam(model.encoder_params, lr=lr)
kl_weight_max = 0.4
for it in range(6):
    x = (torch.rand(8, 20) < 0.3).to(torch.get_default_dtype())
    # generator (decoder): make generated sentences look real to the frozen discriminator, plus reconstruction
    recon_loss, kl_loss = model(x)
    x_gen = model.generate(8)
    loss_G = recon_loss + 0.1 * F.binary_cross_entropy_with_logits(model.discriminator(x_gen), torch.ones(8, 1))
    loss_G.backward()
    torch.nn.utils.clip_grad_norm_(model.decoder_params, 5)
    trainer_G.step()
    trainer_G.zero_grad()
    # encoder: the VAE loss
    recon_loss, kl_loss = model(x)
    loss_E = recon_loss + kl_weight_max * kl_loss
    loss_E.backward()
    torch.nn.utils.clip_grad_norm_(model.encoder_params, 5)
    trainer_E.step()
    trainer_E.zero_grad()
_gb.done(model.encoder, model.decoder)
