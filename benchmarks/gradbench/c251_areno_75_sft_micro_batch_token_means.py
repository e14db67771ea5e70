"""AReno's SFT: `sft_loss_fn` normalizes each pack by that pack's target-token count and training averages the micro-batch losses equally, so a micro-batch with few target tokens weighs as much as one with many, and the gradient is not the window's global token mean.

source: inclusionAI/AReno#75 (https://github.com/inclusionAI/AReno/issues/75), "Fix SFT gradients weighted by microbatch instead of target tokens" (labels kind/bug; a maintainer: "Important finding, I will fix it"): "`sft_loss_fn` normalizes each pack by that pack's target-token count, the backend splits by `mini_bs`, and training averages microbatch losses equally via `loss / grad_scale`. With variable sequence lengths a 1-token microbatch can contribute as much gradient as a 100-token microbatch — this is not global token-mean SFT and biases toward short examples." The three files it names were not read; the language model is reduced to an embedding and a linear head over a 24-token vocabulary. The twin divides each micro-batch's summed token loss by the window's target-token count, the issue's acceptance criterion
family: mean-of-means
shape: AdamW(lr=1e-2), grad_scale = 4 micro-batches per step, micro-batches of 2 sequences of 8 tokens with 1 to 16 target tokens, 2 steps
numeric: a window's tokens are weighted by 1 / (4 x their micro-batch's target count) instead of 1 / (window's target count)
watch: GG105
lint: out: the target-token counts of the micro-batches are data, unknown before run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

grad_scale = 4
_gb.setup()
vocab = 24
micro = []
for i in range(8):
    ids = torch.randint(0, vocab, (2, 8))
    targets = torch.randint(0, vocab, (2, 8))
    mask = torch.zeros(2, 8)
    mask[0, : 1 + (3 * i) % 8] = 1
    mask[1, : 1 + (5 * i + 2) % 8] = 1 if i % 3 else 0
    micro.append((ids, targets, mask))
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 12), torch.nn.Tanh(), torch.nn.Linear(12, vocab))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
for step in range(2):
    window = micro[step * grad_scale:(step + 1) * grad_scale]
    window_tokens = sum(m.sum() for _, _, m in window)
    for ids, targets, mask in window:
        token_loss = F.cross_entropy(model(ids).flatten(0, 1), targets.flatten(), reduction="none").view(2, 8)
        loss = (token_loss * mask).sum() / mask.sum()  # BUG
        (loss / grad_scale).backward()  # BUG
        # FIX: ((token_loss * mask).sum() / window_tokens).backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
