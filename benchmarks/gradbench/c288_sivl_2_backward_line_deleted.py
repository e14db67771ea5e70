"""sivl's trainSimilarityModel.py: the `loss.backward()` line had been deleted by accident, so the similarity model's optimizer steps every batch without gradients and the model keeps its initial weights.

source: aalto-intelligent-robotics/sivl#2 (https://github.com/aalto-intelligent-robotics/sivl/issues/2), the report that trainSimilarityModel.py has no backward call; the maintainers confirmed it was deleted by mistake and restored it. The similarity model is reduced to a siamese MLP scoring pairs of 24-feature descriptors with a binary cross-entropy on same/different labels; Adam. The twin restores the backward
family: missing-backward
shape: Adam(lr=1e-3), 2 epochs of 3 batches of 16 pairs
numeric: the bug never updates the model
watch: GG110
lint: out: a loss computed and never backpropagated is ordinary code; nothing connects it to the step that follows
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class SimilarityModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
        self.head = torch.nn.Linear(16, 1)

    def forward(self, a, b):
        return self.head((self.encoder(a) - self.encoder(b)).abs()).squeeze(1)


_gb.setup()
model = SimilarityModel()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
batches = [(torch.randn(16, 24), torch.randn(16, 24), torch.randint(0, 2, (16,)).double()) for _ in range(3)]
for epoch in range(2):
    for a, b, same in batches:
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(a, b), same.to(a.dtype))
        # FIX: loss.backward()
        optimizer.step()
_gb.done(model)
