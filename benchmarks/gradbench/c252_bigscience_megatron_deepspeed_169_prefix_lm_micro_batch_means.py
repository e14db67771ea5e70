"""BigScience Megatron-DeepSpeed prefix-LM training: the loss is averaged over the trained (suffix) tokens within each micro-batch (`loss_mask.sum()`) and the micro-batch losses are then summed over gradient accumulation (each divided by the accumulation count), so a suffix token in a micro-batch with a short suffix weighs many times more than one in a micro-batch with a long suffix.

source: bigscience-workshop/Megatron-DeepSpeed#169 (https://github.com/bigscience-workshop/Megatron-DeepSpeed/pull/169), "[PrefixLM] Figuring out why prefix lm is doing poorly on short context" (merged): "What Megatron-DS does: averages all tokens trained on (selected via loss_masking) within microbatch (normalisation factor is the number of tokens trained on, `loss_mask.sum()`) ... The issue is we have a high variance of tokens we train on (`loss_mask.sum()`) in prefixlm in micro batches ... If you average the loss within the suffix, and then summing them together. The weight for the token t9 of MB0 is 9 times higher than then one for MB1." gpt_model.py was not read; the GPT is reduced to an embedding and a linear head, DeepSpeed's backward to a division by the accumulation count; one sequence per micro-batch with a random prefix length, as in the PR's table. The twin divides each micro-batch's summed suffix loss by the window's suffix-token count
family: mean-of-means
shape: Adam(lr=5e-3), gradient accumulation 4 micro-batches of one 10-token sequence whose prefix is 1 to 9 tokens, 2 steps
numeric: a suffix token's weight is 1 / (4 x its sequence's suffix length) instead of 1 / (window's suffix tokens)
watch: GG105
lint: out: the suffix lengths come from the loss masks, data unknown before run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gas = 4
_gb.setup()
vocab, length = 20, 10
micro = []
for i in range(8):
    ids = torch.randint(0, vocab, (1, length))
    labels = torch.randint(0, vocab, (1, length))
    prefix = 1 + (7 * i + 3) % 9
    loss_mask = torch.zeros(1, length)
    loss_mask[:, prefix:] = 1
    micro.append((ids, labels, loss_mask))
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.GELU(), torch.nn.Linear(16, vocab))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
for step in range(2):
    window = micro[step * gas:(step + 1) * gas]
    window_tokens = sum(m.sum() for _, _, m in window)
    for ids, labels, loss_mask in window:
        losses = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), reduction="none").view_as(loss_mask)
        loss = torch.sum(losses * loss_mask) / loss_mask.sum()  # BUG
        (loss / gas).backward()  # BUG
        # FIX: (torch.sum(losses * loss_mask) / window_tokens).backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
