"""The Hugging Face Trainer's training step divides every micro-batch's loss by `args.gradient_accumulation_steps`, also in the last accumulation cycle of an epoch, which holds fewer micro-batches when the number of batches is not a multiple of it, so that cycle's gradient is (micro-batches it holds) / gradient_accumulation_steps of its mean and its update is too small.

source: huggingface/transformers#39659 (https://github.com/huggingface/transformers/pull/39659), "fix(trainer): Correct loss scaling for incomplete gradient accumulation steps" (merged): "the loss for each micro-batch is always divided by the configured `args.gradient_accumulation_steps`. This leads to the accumulated loss for the final, incomplete cycle being scaled down too much, resulting in an improperly small gradient update for that step", fixed by dividing by `self.cur_gradient_accumulation_steps`, the cycle's real count (`len(batch_samples)`); reported in #38837 with a logged loss of 0.4992 instead of 0.9984 on the last step of each epoch. The Trainer's inner loop (cycles of batch_samples, training_step with the division, a step at the end of each cycle) is written out on the model's own mean loss (no num_items_in_batch), with an MLP classifier. The twin divides by the cycle's length, as the fix does
family: underscaled-window
shape: AdamW(lr=1e-3, weight decay 0), gradient_accumulation_steps = 4, 2 epochs of 10 batches of 8 (cycles of 4, 4 and 2)
numeric: the third step of every epoch uses 2 micro-batches divided by 4 (half its mean)
watch: GG111
lint: GG111
bug-step: 3
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps = 4
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
train_dataloader = [(torch.randn(8, 12), torch.randint(0, 4, (8,))) for _ in range(10)]


def training_step(inputs, cur_gradient_accumulation_steps):
    x, y = inputs
    loss = F.cross_entropy(model(x), y)
    loss = loss / gradient_accumulation_steps  # BUG
    # FIX: loss = loss / cur_gradient_accumulation_steps
    loss.backward()
    return loss.detach()


for epoch in range(2):
    batches = iter(train_dataloader)
    for update_step in range((len(train_dataloader) + gradient_accumulation_steps - 1) // gradient_accumulation_steps):
        batch_samples = [b for _, b in zip(range(gradient_accumulation_steps), batches)]
        for inputs in batch_samples:
            training_step(inputs, len(batch_samples))
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
