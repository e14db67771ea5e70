"""speculators draft-model training under data parallelism: each rank divides its summed token loss by its own count of supervised tokens (`loss_mask.sum()`) and the data-parallel all-reduce then averages the ranks' gradients, so a supervised token on a rank with few of them weighs more than one on a rank with many, unlike the global per-token mean over all ranks.

source: vllm-project/speculators#942 (https://github.com/vllm-project/speculators/pull/942), "fix(loss): normalize training loss by global (cross-rank) token count" (open: unconfirmed). Read: the pull request's title and its review comments (a measured skew of 1.194x in supervised tokens across ranks; "any residual imbalance reintroduces the same bias, and a rank with zero supervised tokens stays possible"; a suggested two-rank test with 1 valid token on rank 0). The training code was not read. Two ranks are run in one process as DDP computes them: each rank's loss divided by the world size (the all-reduce mean) and backpropagated into one step; the draft model is reduced to an embedding + linear language model; the ranks hold 6 and 40 supervised tokens. The twin divides each rank's summed loss by the global supervised-token count times the world size, so the mean of the ranks is the global per-token mean (the pull request's normaliser)
family: mean-of-means
shape: AdamW(lr=2e-3), 2 ranks x batches of 4 sequences of 12 tokens, 6 and 40 supervised tokens; 4 steps
numeric: every step weighs rank 0's 6 tokens like rank 1's 40 (each token of rank 0 weighs 6.7x a token of rank 1)
watch: GG105
lint: out: the supervised-token counts of the ranks are data, unknown before run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

vocab, world_size = 20, 2
_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Tanh(), torch.nn.Linear(16, vocab))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)


def rank_batch(n_supervised):
    tokens = torch.randint(0, vocab, (4, 13))
    mask = torch.zeros(4, 12, dtype=torch.bool)
    mask.view(-1)[torch.randperm(48)[:n_supervised]] = True
    return tokens[:, :-1], tokens[:, 1:], mask


steps = [[rank_batch(6), rank_batch(40)] for _ in range(4)]
for ranks in steps:
    global_tokens = sum(int(mask.sum()) for _, _, mask in ranks)
    optimizer.zero_grad()
    for inputs, labels, loss_mask in ranks:
        token_loss = F.cross_entropy(model(inputs).reshape(-1, vocab), labels.reshape(-1), reduction="none")
        loss = (token_loss * loss_mask.reshape(-1)).sum() / loss_mask.sum()  # BUG
        # FIX: loss = (token_loss * loss_mask.reshape(-1)).sum() * world_size / global_tokens
        (loss / world_size).backward()  # the data-parallel all-reduce averages the ranks' gradients
    optimizer.step()
_gb.done(model)
