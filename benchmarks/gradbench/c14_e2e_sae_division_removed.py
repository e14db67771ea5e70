"""Sparse-autoencoder training with the loss division by the accumulation steps removed.

source: ApolloResearch/e2e_sae#70 (https://github.com/ApolloResearch/e2e_sae/pull/70), "Divide loss by grad accumulation steps": reverts #68, which "incorrectly removed this. We need to do this division because our losses include means"
family: unscaled
shape: an SAE reconstruction + sparsity loss (both means) back-propagated per micro-batch, stepped every gradient_accumulation_steps micro-batches
numeric: the step's gradient is gradient_accumulation_steps (2) times the window mean
watch: GG104
lint: GG104
bug-step: 1
"""
import torch

import _gb

_gb.setup()
encoder, decoder = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
optimizer = torch.optim.SGD(list(encoder.parameters()) + list(decoder.parameters()), lr=0.05)
_gb.start(encoder, decoder)
gradient_accumulation_steps, sparsity_coeff = 2, 0.1
for batch_idx in range(10):
    acts = torch.randn(6, 8)
    c = torch.relu(encoder(acts))
    recon = decoder(c)
    loss = ((recon - acts) ** 2).mean() + sparsity_coeff * c.abs().mean()
    # FIX: loss = loss / gradient_accumulation_steps
    loss.backward()
    if (batch_idx + 1) % gradient_accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(encoder, decoder)
