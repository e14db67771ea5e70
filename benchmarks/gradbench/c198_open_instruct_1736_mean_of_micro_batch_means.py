"""open-instruct finetune.py with gradient accumulation: each micro-batch's loss is the model's mean over its own supervised tokens, divided by the accumulation steps, so a window's gradient is the mean of per-micro-batch token means: a token in a micro-batch with few supervised tokens weighs more than one in a full micro-batch, unlike the full batch's token mean.

source: allenai/open-instruct#1736 (https://github.com/allenai/open-instruct/pull/1736), "Fix token-weighted loss under gradient accumulation in finetune.py" (closed, not merged): "When gradient_accumulation_steps > 1, scale each microbatch loss by its supervised token count and renormalize accumulated gradients so all tokens are weighted equally (matching the sequence-parallel path and the old reduce_loss=sum behavior). Fixes the mean-of-microbatch-means bug reported in #1728." The script was not read beyond the pull request's diff excerpt (loss = outputs.loss; pred_tokens_in_batch counted per micro-batch); the model is reduced to an embedding + linear language model; labels -100 mask a different share of each micro-batch's tokens. The twin weights each micro-batch's mean by its token count over the window's total, what the pull request computes
family: mean-of-means
shape: AdamW(lr=2e-3), gradient_accumulation_steps = 4, micro-batches of 4 sequences of 12 with 4 to 40 supervised tokens; 3 steps
numeric: every step's gradient weighs micro-batches equally instead of by their token counts
watch: GG105
lint: out: the token counts of the micro-batches are data, unknown before run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps, vocab = 4, 24
_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 24), torch.nn.Tanh(), torch.nn.Linear(24, vocab))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
windows = []
for step in range(3):
    window = []
    for k, keep in enumerate((0.1, 0.9, 0.3, 0.6)):
        tokens = torch.randint(0, vocab, (4, 13))
        labels = tokens[:, 1:].clone()
        labels[torch.rand(labels.shape) > keep] = -100
        labels[:, 0] = tokens[:, 1]
        window.append((tokens[:, :-1], labels))
    windows.append(window)
for window in windows:
    total_tokens = sum(int((labels != -100).sum()) for _, labels in window)
    for inputs, labels in window:
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), ignore_index=-100)
        loss = loss / gradient_accumulation_steps  # BUG
        # FIX: loss = loss * int((labels != -100).sum()) / total_tokens
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
