"""twinkle PPOLoss with loss_agg_mode='token-mean': each micro-batch's loss is the mean over its own valid tokens and the micro-batches are weighted by their share of the samples (inherited from GRPO), so with responses of unequal length the window's gradient depends on how the samples are split into micro-batches instead of being the token mean over the whole batch.

source: modelscope/twinkle#292 (https://github.com/modelscope/twinkle/pull/292), "fix: weight PPO token-mean micro-batches by valid tokens": "PPOLoss(loss_agg_mode='token-mean') averages valid tokens within a micro-batch but inherits sample-count weighting from GRPO. With response lengths 1 and 3 and advantages +1 and -1, changing micro_batch_size from 2 to 1 changes the loss from 0.5 to 0 and the same binary policy parameter's gradient from 0.25 to 0. Override PPO's micro-batch weight with the fraction of valid tokens in the logical input batch." The pull request is open. The code was not read beyond the description: the policy is reduced to a linear token policy, the PPO ratio to exp(logp - old_logp) at the first (on-policy) epoch, clipping left out (inactive when the ratio is 1); micro_batch_size = 1 over 4 responses of lengths 1, 3, 2, 6. The twin weights each micro-batch by its share of the valid tokens, as the pull request does
family: mean-of-means
shape: SGD(lr=0.5); 4 responses (lengths 1, 3, 2, 6, advantages +1, -1, +1, -1), micro_batch_size = 1, one optimizer step per batch, 3 batches
numeric: each step's gradient weights the tokens of short responses more than those of long ones
watch: GG105
lint: out: the weight comes from the micro-batch's sample count at run time; which count the token mean needs depends on the masks of the data
bug-step: 1
"""
import torch

import _gb

vocab, dim = 10, 6
_gb.setup()
policy = torch.nn.Linear(dim, vocab)
_gb.start(policy)
optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
lengths = [1, 3, 2, 6]
advantages = [1.0, -1.0, 1.0, -1.0]
for batch in range(3):
    states = [torch.randn(n, dim) for n in lengths]
    actions = [torch.randint(0, vocab, (n,)) for n in lengths]
    total_samples = len(lengths)
    total_tokens = sum(lengths)
    optimizer.zero_grad()
    for s, a, adv, n in zip(states, actions, advantages, lengths):
        logp = torch.log_softmax(policy(s), -1).gather(1, a[:, None]).squeeze(1)
        ratio = torch.exp(logp - logp.detach())
        token_mean = (-adv * ratio).sum() / n
        weight = 1 / total_samples  # BUG
        # FIX: weight = n / total_tokens
        (token_mean * weight).backward()
    optimizer.step()
_gb.done(policy)
