"""The HF Trainer's training step before the gradient-accumulation fix: each micro-batch's token mean divided by the accumulation steps.

source: huggingface/transformers#34191 (https://github.com/huggingface/transformers/pull/34191), the fix for the gradient-accumulation loss of Oct 2024 (blog: huggingface/blog#2414); Lightning-AI/pytorch-lightning#20350 reports the same arithmetic in Lightning
family: mean-of-means
shape: training_step: loss = model(**inputs).loss (cross-entropy averaged over the micro-batch's non-padding tokens); loss = loss / gradient_accumulation_steps; backward; step every gradient_accumulation_steps
numeric: micro-batches with few tokens weigh as much as micro-batches with many: each token's weight is 1/(K * n_i) instead of 1/sum(n_j); for padded variable-length text the gradient is off by tens of percent
watch: GG105
lint: out: the token counts of the micro-batches are data, unknown before run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class CausalLM(torch.nn.Module):
    def __init__(self, vocab=20, d=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, input_ids, labels, reduction="mean"):
        logits = self.head(torch.tanh(self.embed(input_ids)))
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100,
                               reduction=reduction)


def make_batch(lengths, vocab=20, width=12):
    ids = torch.randint(0, vocab, (len(lengths), width))
    labels = ids.clone()
    for row, n in enumerate(lengths):
        labels[row, n:] = -100
    return ids, labels


_gb.setup()
model = CausalLM()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
_gb.start(model)
gradient_accumulation_steps = 4
batches = [make_batch(l) for l in ([12, 3], [2, 2], [11, 12], [5, 4], [12, 12], [3, 2], [7, 1], [2, 9])]
for update in range(2):
    window = batches[update * 4:(update + 1) * 4]
    num_items_in_batch = sum(int((labels[:, 1:] != -100).sum()) for _, labels in window)
    for input_ids, labels in window:
        loss = model(input_ids, labels)  # BUG
        loss = loss / gradient_accumulation_steps  # BUG
        # FIX: loss = model(input_ids, labels, reduction="sum") / num_items_in_batch
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
