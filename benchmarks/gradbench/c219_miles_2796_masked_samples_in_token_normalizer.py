"""miles' per-token policy loss: the numerator sums the token losses of the active (unmasked) tokens, but the denominator clamps every sample's token count to at least one (`clamp_min(1)`), so a fully masked sample in the batch still adds one token to the normaliser and the batch's gradient shrinks by T / (T + M) for T active tokens and M fully masked samples.

source: radixark/miles#2796 (https://github.com/radixark/miles/pull/2796), "fix(loss): exclude masked samples from token normalizer" (open: unconfirmed): "The numerator already excludes fully masked samples, but the previous denominator used `clamp_min(1)` independently for every sample. A batch with one valid four-token response and one fully masked response was therefore normalized by 5 instead of 4, shrinking gradients by 20%. More generally, with T active tokens and M fully masked samples, the old gradient scale was T / (T + M)". The loss code was not read beyond the description; the policy is reduced to an embedding + linear language model over response tokens with a per-token log-likelihood loss weighted by an advantage; batches of 6 responses, 2 or 3 of them fully masked, with 3 to 6 active tokens each. The twin normalises by the active-token count, the fix
family: num-items
shape: SGD(lr=0.5), batches of 6 responses of 8 tokens (2 to 3 fully masked); 5 steps
numeric: every step's gradient is scaled by T / (T + M), 14 / 17 or 18 / 20
watch: out: which count a loss is divided by is data; every gradient is applied once and cleared
lint: out: the normaliser is computed from the loss masks at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

vocab = 16
_gb.setup()
policy = torch.nn.Sequential(torch.nn.Embedding(vocab, 12), torch.nn.Tanh(), torch.nn.Linear(12, vocab))
_gb.start(policy)
optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
batches = []
for step in range(5):
    tokens = torch.randint(0, vocab, (6, 9))
    loss_mask = torch.zeros(6, 8)
    for i, n in enumerate((4, 0, 6, 3, 0, 5) if step % 2 else (5, 3, 0, 0, 0, 6)):
        loss_mask[i, :n] = 1
    batches.append((tokens, loss_mask, torch.randn(6, 1)))
for tokens, loss_mask, advantages in batches:
    logp = -F.cross_entropy(policy(tokens[:, :-1]).reshape(-1, vocab), tokens[:, 1:].reshape(-1), reduction="none")
    token_loss = -(logp.view(6, 8) * advantages) * loss_mask
    normalizer = loss_mask.sum(dim=1).clamp_min(1).sum()  # BUG
    # FIX: normalizer = loss_mask.sum().clamp_min(1)
    loss = token_loss.sum() / normalizer
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(policy)
