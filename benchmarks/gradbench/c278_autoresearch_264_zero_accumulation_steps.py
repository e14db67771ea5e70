"""autoresearch's train.py: `grad_accum_steps = TOTAL_BATCH_SIZE // tokens_per_fwdbwd` is 0 when the configured total batch is smaller than one forward pass's tokens, so the micro-step loop runs no backward pass and the optimizer steps without gradients; the run trains nothing and reports no error.

source: karpathy/autoresearch#264 (https://github.com/karpathy/autoresearch/pull/264), open: it guards the division (grad_accum_steps at least 1, or an assertion) because a TOTAL_BATCH_SIZE below DEVICE_BATCH_SIZE * MAX_SEQ_LEN gives grad_accum_steps = 0 and "the optimizer steps without gradients". train.py was not read beyond the pull request; the GPT is reduced to an embedding and an MLP over a 32-token vocabulary, the Muon/AdamW pair to AdamW. The twin takes max(1, ...) of the count, the PR's fix
family: missing-backward
shape: AdamW(lr=3e-3, weight_decay 0), DEVICE_BATCH_SIZE 4, MAX_SEQ_LEN 16, TOTAL_BATCH_SIZE 32 tokens (so 0 micro-steps in the bug, 1 in the twin), 6 steps
numeric: the bug never updates the model
watch: GG110
lint: out: how many micro-steps the loop runs is integer arithmetic on configuration
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

vocab, DEVICE_BATCH_SIZE, MAX_SEQ_LEN, TOTAL_BATCH_SIZE = 32, 4, 16, 32
tokens_per_fwdbwd = DEVICE_BATCH_SIZE * MAX_SEQ_LEN
grad_accum_steps = TOTAL_BATCH_SIZE // tokens_per_fwdbwd  # BUG
# FIX: grad_accum_steps = max(1, TOTAL_BATCH_SIZE // tokens_per_fwdbwd)
_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, vocab))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
for step in range(6):
    for micro_step in range(grad_accum_steps):
        seq = torch.randint(0, vocab, (DEVICE_BATCH_SIZE, MAX_SEQ_LEN + 1))
        x, y = seq[:, :-1], seq[:, 1:]
        loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        loss = loss / grad_accum_steps
        loss.backward()
    optimizer.step()
    model.zero_grad(set_to_none=True)
_gb.done(model)
