"""HSAN's train.py (hard sample aware network for graph clustering): the training loop runs a full-graph forward, backward and `optimizer.step()` every epoch and never calls `optimizer.zero_grad()`, so each epoch's update applies the sum of all earlier epochs' gradients.

source: yueliu1999/HSAN#6 (https://github.com/yueliu1999/HSAN/issues/6), open: "there is no optimizer.zero_grad() in train.py". train.py was read: each epoch runs the model on the whole graph, builds the similarity matrix and the hard-sample-aware InfoNCE loss, then calls loss.backward() and optimizer.step(), with no zero_grad anywhere. The two MLP encoders (attribute and structure views) are kept at a small size, the similarity and loss are reduced to a plain cross-view InfoNCE over 24 nodes (the hard-sample weights, which are refreshed from clustering, are left out). The twin clears the gradients before each backward
family: missing-clear
shape: Adam(lr=1e-3), 24 nodes with 12 attributes, two 2-layer encoders, 8 full-graph epochs
numeric: epoch k applies the sum of the k gradients so far
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class HSAN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attr = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
        self.struct = torch.nn.Sequential(torch.nn.Linear(24, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))

    def forward(self, X, A):
        return F.normalize(self.attr(X), dim=1), F.normalize(self.struct(A), dim=1)


_gb.setup()
node_num = 24
X = torch.randn(node_num, 12)
A = (torch.rand(node_num, node_num) < 0.2).to(X.dtype)
A = ((A + A.t()) > 0).to(X.dtype)
model = HSAN()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(8):
    model.train()
    # FIX: optimizer.zero_grad()
    Z1, Z2 = model(X, A)
    S = Z1 @ Z2.t() / 0.5
    loss = F.cross_entropy(S, torch.arange(node_num)) + F.cross_entropy(S.t(), torch.arange(node_num))
    loss.backward()
    optimizer.step()
_gb.done(model)
