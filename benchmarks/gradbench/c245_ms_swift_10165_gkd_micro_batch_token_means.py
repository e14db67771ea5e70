"""ms-swift's HF GKD trainer (generalized knowledge distillation) with gradient accumulation: the JSD loss is normalized by each micro-batch's own count of valid response tokens and the Trainer then averages these per-micro-batch means over the window, so tokens in micro-batches with few valid tokens weigh more than in the window's per-token mean, and the gradient depends on how the same samples are partitioned.

source: modelscope/ms-swift#10165 (https://github.com/modelscope/ms-swift/pull/10165), "fix(gkd): normalize HF loss across accumulation and DDP" (open): "HF GKD normalizes JSD by each micro-batch's valid-token count. Trainer accumulation and DDP then average these local means, so variable-length responses receive different weights when the same effective batch is partitioned differently. This can change gradient direction even with fixed, complete teacher logits and pure JSD. Normalize against the actual encoded response-token count across the optimizer-update window". gkd_trainer.py was not read: the loss is a token-level generalized JSD (beta 0.5) between a student and a fixed teacher over a 12-word vocabulary, masked per token; the Trainer's division by the accumulation count is kept; the language models are reduced to MLPs over token features. The twin divides each micro-batch's summed JSD by the window's valid-token count, the pull request's normalization
family: mean-of-means
shape: AdamW(lr=1e-3), gradient_accumulation_steps = 4; micro-batches of 2 responses of 6 tokens with 1 to 12 valid tokens, 2 steps
numeric: a window's tokens are weighted by 1 / (4 x their micro-batch's valid count) instead of 1 / (window's valid count)
watch: GG105
lint: out: the valid-token counts of the micro-batches are data, unknown before run time
bug-step: 1
"""
import torch

import _gb


def jsd(student_logits, teacher_logits, beta=0.5):
    s, t = student_logits.log_softmax(-1), teacher_logits.log_softmax(-1)
    m = torch.logsumexp(torch.stack([s + torch.log(torch.tensor(beta)), t + torch.log(torch.tensor(1 - beta))]), 0)
    return beta * (s.exp() * (s - m)).sum(-1) + (1 - beta) * (t.exp() * (t - m)).sum(-1)


gradient_accumulation_steps = 4
_gb.setup()
teacher = torch.nn.Linear(8, 12)
micro = []
for i in range(8):
    feats = torch.randn(2, 6, 8)
    mask = torch.zeros(2, 6)
    mask[0, : 1 + i % 6] = 1
    mask[1, : 1 + (i * 5) % 6] = 1
    micro.append((feats, mask))
student = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 12))
_gb.start(student)
optimizer = torch.optim.AdamW(student.parameters(), lr=1e-3)
for w in range(2):
    window = micro[w * gradient_accumulation_steps:(w + 1) * gradient_accumulation_steps]
    window_tokens = sum(m.sum() for _, m in window)
    for feats, mask in window:
        with torch.no_grad():
            teacher_logits = teacher(feats)
        per_token = jsd(student(feats), teacher_logits)
        loss = (per_token * mask).sum() / mask.sum()  # BUG
        # FIX: loss = (per_token * mask).sum() / window_tokens * gradient_accumulation_steps
        (loss / gradient_accumulation_steps).backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(student)
