"""JoeyNMT training with `batch_multiplier` (gradient accumulation): the update counter is reset at the start of every epoch, and when an epoch's batches end inside an accumulation window nothing steps or clears the gradients of those leftover batches, so they are added to the first update of the next epoch (which then holds more batches than the multiplier divides by).

source: joeynmt/joeynmt#96 (https://github.com/joeynmt/joeynmt/pull/96): "The optimizer gradients now get set to zero at the start of each epoch to effectively skip the leftover examples of the last epoch that get computed if batch_type == \"token\"" (closed; the change is unconfirmed as merged). The training loop was not read: it follows JoeyNMT's batch_multiplier logic as the pull request implies (count = batch_multiplier - 1 at the start of each epoch; update = count == 0; each batch loss divided by batch_multiplier and backpropagated; clip, step and zero_grad on update); the transformer is reduced to an MLP classifier; 7 batches per epoch with batch_multiplier 3 (one leftover batch per epoch), 3 epochs. The twin steps each epoch's last, shorter window with its losses divided by its own length (the pull request instead zeroes the leftover gradients; either stops the leak, and this one drops no data)
family: leaked-window
shape: Adam(lr=2e-3), batch_multiplier = 3, clip 1.0; 7 batches of 16 per epoch, 3 epochs
numeric: the first update of epochs 2 and 3 applies 4 batches' gradients (the leftover of the previous epoch and 3 new) divided by 3
watch: GG114
lint: GG103
bug-step: 3
"""
import torch
import torch.nn.functional as F

import _gb

batch_multiplier, epochs = 3, 3
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(30, 48), torch.nn.ReLU(), torch.nn.Linear(48, 8))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
train_iter = [(torch.randn(16, 30), torch.randint(0, 8, (16,))) for _ in range(7)]


def train_step(batch, update, multiplier):
    loss = F.cross_entropy(model(batch[0]), batch[1]) / multiplier
    loss.backward()
    if update:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    return loss.item()


for epoch_no in range(epochs):
    count = batch_multiplier - 1
    for i, batch in enumerate(train_iter):
        update = count == 0  # BUG
        train_step(batch, update, batch_multiplier)  # BUG
        # FIX: last = len(train_iter) - len(train_iter) % batch_multiplier
        # FIX: update = count == 0 or i == len(train_iter) - 1
        # FIX: train_step(batch, update, batch_multiplier if i < last else len(train_iter) - last)
        count = batch_multiplier if update else count
        count -= 1
_gb.done(model)
