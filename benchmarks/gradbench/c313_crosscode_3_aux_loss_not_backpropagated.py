"""crosscode's TopK (and BatchTopK, GroupMax) crosscoder trainer: `_calculate_loss_and_log` builds `loss = reconstruction_loss + lambda_aux * aux_loss` but returns `reconstruction_loss` in both branches, and the returned tensor is the one backpropagated, so the AuxK dead-latent term (logged, never optimized) contributes no gradient and dead latents are never revived.

source: oclivegriffin/crosscode#3 (https://github.com/oclivegriffin/crosscode/pull/3), "fix: AuxK loss carries no gradient, now backprop combined loss, not reconstruction only" (open): "computes the combined loss `loss = reconstruction_loss + lambda_aux * aux_loss`, but `_calculate_loss_and_log` returns `reconstruction_loss` (not `loss`) in both the logging and non-logging branches. The returned tensor is the one that gets `.backward()` called on it ... so the AuxK dead-latent revival term never contributes any gradient", with the two-line fix. The trainer is reduced to a TopK sparse autoencoder (encoder, top-k activation, decoder) on random activations with the AuxK loss of the top-k_aux dead latents reconstructing the residual; a latent counts as dead after 2 steps without firing. The twin returns loss
family: detached-loss
shape: Adam(lr=1e-3), 8 steps on batches of 32 (d_model 16, 48 latents, k = 4, k_aux = 8, lambda_aux 1/32)
numeric: the dead latents' encoder rows and decoder columns never get the AuxK gradient
watch: out: a loss term that never reaches a parameter leaves no gradient to check; every gradient present is applied once and cleared
lint: out: which loss a method returns for backward is the loss's definition, not the gradient buffer's handling
bug-step: 3
"""
import torch

import _gb

d_model, n_latents, k, k_aux, lambda_aux, dead_after = 16, 48, 4, 8, 1 / 32, 2


class TopKCrosscoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.W_enc, self.W_dec = torch.nn.Linear(d_model, n_latents), torch.nn.Linear(n_latents, d_model)

    def encode_pre(self, x):
        return torch.relu(self.W_enc(x))

    @staticmethod
    def topk(pre, k, mask=None):
        pre = pre if mask is None else pre * mask
        vals, idx = pre.topk(k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, idx, vals)


_gb.setup()
model = TopKCrosscoder()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
steps_since_fired = torch.zeros(n_latents)


def _calculate_loss_and_log(batch, log):
    global steps_since_fired
    pre = model.encode_pre(batch)
    latents = model.topk(pre, k)
    recon = model.W_dec(latents)
    reconstruction_loss = (recon - batch).pow(2).sum(-1).mean()
    steps_since_fired = torch.where(latents.detach().sum(0) > 0, torch.zeros_like(steps_since_fired),
                                    steps_since_fired + 1)
    dead = (steps_since_fired >= dead_after).to(pre.dtype)
    aux_latents = model.topk(pre, k_aux, mask=dead)
    residual = (batch - recon).detach()
    aux_loss = (aux_latents @ model.W_dec.weight.T - residual).pow(2).sum(-1).mean()
    loss = reconstruction_loss + lambda_aux * aux_loss
    if log:
        log_dict = {"train/reconstruction_loss": reconstruction_loss.item(), "train/aux_loss": aux_loss.item()}
        return reconstruction_loss, log_dict  # BUG
        # FIX: return loss, log_dict
    return reconstruction_loss, None  # BUG
    # FIX: return loss, None


for step in range(8):
    batch = torch.randn(32, d_model)
    loss, _ = _calculate_loss_and_log(batch, log=step % 2 == 0)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(model)
