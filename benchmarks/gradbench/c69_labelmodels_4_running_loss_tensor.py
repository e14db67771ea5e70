"""labelmodels: running_loss sums the loss tensors of the epoch, holding every batch's graph.

source: BatsResearch/labelmodels#4 (https://github.com/BatsResearch/labelmodels/issues/4), "Memory leak in training loop": "You're holding on to the graph for each batch per epoch, since running_loss is the sum of non-detached tensors"; the maintainer: "Ah, good catch. Thanks! Will merge"
family: graph-logging
shape: label_model.py _do_estimate_label_model: for i_batch, inputs in enumerate(batches): optimizer.zero_grad(); loss = self._get_norm_constant() - torch.sum(log_likelihood) (+ regularization); loss.backward(); optimizer.step(); running_loss += loss
numeric: running_loss keeps one autograd node chain per batch until the epoch ends
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch

import _gb


class LabelModel(torch.nn.Module):
    def __init__(self, num_lfs=5, num_classes=2):
        super().__init__()
        self.accuracy = torch.nn.Parameter(torch.full((num_lfs,), 0.7))
        self.class_balance = torch.nn.Parameter(torch.zeros(num_classes))

    def log_likelihood(self, votes):
        return torch.log_softmax(self.class_balance, 0)[votes.clamp(max=1)].sum(-1) + (self.accuracy * votes).sum(-1)


_gb.setup()
model = LabelModel()
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
running_loss = 0.0
for i_batch in range(6):
    votes = torch.randint(0, 2, (16, 5))
    optimizer.zero_grad()
    loss = -torch.sum(model.log_likelihood(votes)) + 0.1 * (model.accuracy ** 2).sum()
    loss.backward()
    optimizer.step()
    running_loss += loss  # BUG
    # FIX: running_loss += loss.item()
_gb.done(model, kept=running_loss)
