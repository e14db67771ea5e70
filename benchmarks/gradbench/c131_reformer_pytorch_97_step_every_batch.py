"""reformer-pytorch pretraining script: every micro-batch's loss is divided by gradient_accumulation_steps, but the optimizer steps and clears after every backward, so each step applies 1/K of one batch's gradient instead of the mean of K batches.

source: lucidrains/reformer-pytorch#97 (https://github.com/lucidrains/reformer-pytorch/issues/97), "Reformer pre-training gradient accumulation": "I was looking at the reformer pretraining script and noticed that the optimizer.step() is called at every step and not after every gradient_accumulate steps. Is this a bug or am I missing out something?" lucidrains (author): "that was actually pull-requested in some time ago ... i put in a quick fix here" (commit 42a8682). Code read at that commit (pretraining/self-supervised.py, ReformerTrainer.train): if gradient_accumulation_steps > 1: loss /= gradient_accumulation_steps; loss.backward(); ...; global_steps += 1; if global_steps % gradient_accumulation_steps == 0: optimizer.step(); self.model.zero_grad(). The pre-fix lines were not read: the bug program steps and clears unconditionally, as the issue describes. ReformerLM and the masked-token loss are reduced to a small embedding language model with cross-entropy on masked positions; AdamW The twin steps once per window, as the fix does, and weighs the window's masked tokens equally (a summed loss divided by the window's token count before the step): the per-micro-batch means divided by K, which the script keeps, average micro-batches over different numbers of masked tokens (a defect of its own, which the watch reports as GG105).
family: underscaled-window
shape: for epoch in range(epochs): for step, batch in enumerate(train_dataloader): for data in batch: output = self.model(inputs); loss = loss_fn(output[loss_mx], labels[loss_mx]); if gradient_accumulation_steps > 1: loss /= gradient_accumulation_steps; loss.backward(); global_steps += 1; optimizer.step(); self.model.zero_grad(). gradient_accumulation_steps = 4, 8 batches of 1 sequence group, 2 epochs
numeric: 4 times as many steps, each on a quarter of one batch's gradient
watch: GG111
lint: GG111
bug-step: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import _gb


class TinyLM(nn.Module):
    def __init__(self, num_tokens=20, dim=16):
        super().__init__()
        self.emb = nn.Embedding(num_tokens, dim)
        self.out = nn.Linear(dim, num_tokens)

    def forward(self, x):
        return self.out(torch.tanh(self.emb(x)))


def mask_tokens(inputs, mask_token=0):
    labels = inputs.clone()
    masked = torch.rand(inputs.shape) < 0.3
    labels[~masked] = -100
    inputs = inputs.masked_fill(masked, mask_token)
    return inputs, labels


_gb.setup()
model = TinyLM()
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
gradient_accumulation_steps = 4
train_dataloader = [[torch.randint(1, 20, (4, 12))] for _ in range(8)]
global_steps = 0
# FIX: window_tokens = 0
for epoch in range(2):
    for step, batch in enumerate(train_dataloader):
        for data in batch:
            inputs, labels = mask_tokens(data)
            output = model(inputs)
            loss_mx = labels != -100
            output = output[loss_mx].view(-1, 20)
            labels = labels[loss_mx].view(-1)
            loss = loss_fn(output, labels)  # BUG
            # FIX: loss = F.cross_entropy(output, labels, reduction="sum")  # the window's token mean, below
            if gradient_accumulation_steps > 1:  # BUG
                loss /= gradient_accumulation_steps  # BUG
            loss.backward()
            # FIX: window_tokens += labels.numel()
            global_steps += 1
            # FIX: if global_steps % gradient_accumulation_steps == 0:
            # FIX:     for p in model.parameters():
            # FIX:         p.grad /= window_tokens
            # FIX:     optimizer.step()
            # FIX:     model.zero_grad()
            # FIX:     window_tokens = 0
            optimizer.step()  # BUG
            model.zero_grad()  # BUG
_gb.done(model)
