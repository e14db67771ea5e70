"""A-GCN's adaptive adjacency: the attention matrix built from the features through `W_theta` and `W_phi` is detached from the computational graph before the graph convolution uses it, so the two weight matrices that define the adjacency never receive a gradient and stay at their initialisation.

source: queenie88/A-GCN#4 (https://github.com/queenie88/A-GCN/issues/4), "Question about gradient flow" (closed): "If **adj** is **detached** from the computation graph, how could the two weight matrices be updated (i.e. **W_phi, W_theta**)?"; the author: "You are right，the .detech() should be removed. We forget to modify this code, but now we have updated it in our code." The model is one adaptive-adjacency graph convolution over 10 label nodes (theta = x W_theta, phi = x W_phi, adj = softmax(theta phi^T)) and a multi-label head on random features. The twin keeps the adjacency in the graph
family: detached-loss
shape: SGD(lr=0.1, momentum 0.9), 6 steps on batches of 8 with 10 nodes of 12 features
numeric: W_theta and W_phi never move
watch: out: a detached path leaves those weights without a gradient; every gradient present is applied once and cleared
lint: out: a detach inside the forward is the model's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class AdaptiveGCN(torch.nn.Module):
    def __init__(self, feat=12, emb=8, out=16):
        super().__init__()
        self.W_theta = torch.nn.Linear(feat, emb, bias=False)
        self.W_phi = torch.nn.Linear(feat, emb, bias=False)
        self.gc = torch.nn.Linear(feat, out)
        self.head = torch.nn.Linear(out, 1)

    def forward(self, x):
        theta, phi = self.W_theta(x), self.W_phi(x)
        adj = torch.softmax(theta @ phi.transpose(1, 2), dim=-1)
        adj = adj.detach()  # BUG
        h = F.relu(self.gc(adj @ x))
        return self.head(h).squeeze(-1)


_gb.setup()
model = AdaptiveGCN()
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for step in range(6):
    x, y = torch.randn(8, 10, 12), torch.randint(0, 2, (8, 10)).double()
    loss = F.binary_cross_entropy_with_logits(model(x), y.to(x.dtype))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(model)
