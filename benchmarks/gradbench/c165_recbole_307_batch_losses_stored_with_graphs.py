"""RecBole Trainer._train_epoch: the running total of the epoch's loss is built from each batch's loss tensor (not its value), so the total keeps every batch's autograd graph until the epoch ends and large runs go out of memory.

source: RUCAIBox/RecBole#307 (https://github.com/RUCAIBox/RecBole/pull/307), "FIX: bug of storing loss in each batch cause out of memory in Trainer" (merged). Only the title was read: the loop follows RecBole's trainer shape (for batch_idx, interaction in enumerate(train_data): optimizer.zero_grad(); loss = loss_func(interaction); total_loss = loss if total_loss is None else total_loss + loss; loss.backward(); optimizer.step()), the recommender reduced to a BPR model with user and item embeddings. The twin accumulates loss.item(), the fix the title describes
family: graph-logging
shape: BPR with 20 users, 30 items, 8 dimensions; Adam(lr=1e-2); one epoch of 10 batches of 16 (user, positive, negative) triples
numeric: the total keeps all 10 batch graphs alive to the end of the epoch
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class BPR(torch.nn.Module):
    def __init__(self, n_users=20, n_items=30, dim=8):
        super().__init__()
        self.user_embedding = torch.nn.Embedding(n_users, dim)
        self.item_embedding = torch.nn.Embedding(n_items, dim)

    def calculate_loss(self, interaction):
        user, pos, neg = interaction
        u = self.user_embedding(user)
        pos_score = (u * self.item_embedding(pos)).sum(-1)
        neg_score = (u * self.item_embedding(neg)).sum(-1)
        return -F.logsigmoid(pos_score - neg_score).mean()


_gb.setup()
model = BPR()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
train_data = [(torch.randint(0, 20, (16,)), torch.randint(0, 30, (16,)), torch.randint(0, 30, (16,)))
              for _ in range(10)]
total_loss = None
for batch_idx, interaction in enumerate(train_data):
    optimizer.zero_grad()
    loss = model.calculate_loss(interaction)
    total_loss = loss if total_loss is None else total_loss + loss  # BUG
    # FIX: total_loss = loss.item() if total_loss is None else total_loss + loss.item()
    loss.backward()
    optimizer.step()
_gb.done(model, kept=[total_loss] if isinstance(total_loss, torch.Tensor) else [])
