"""DGL examples' training loops: after `opt.step()` the loop records the loss with `total_loss += loss` on the loss tensor itself, so `total_loss` joins every step's computation graph and keeps all of them (their nodes) alive until the epoch's total is dropped.

source: dmlc/dgl#5302 (https://github.com/dmlc/dgl/issues/5302), "[Examples] Update examples to record total loss via total_loss += loss.detach()": "Using loss directly: for x, y in dataloader: ... opt.step(); total_loss += loss. This causes total_loss to be added the computation graph, creating extra work on the GPU." (open; a maintainer, jermainewang, asked how printing would be affected; no change was seen). The examples were not read: the loop is the issue's pattern; the graph network is reduced to a two-layer mean-aggregation GNN over a fixed 20-node random graph, trained on node classification for one epoch of 8 mini-batches of target nodes. The twin records total_loss += loss.detach(), the issue's proposal
family: graph-logging
shape: Adam(lr=1e-2); 20 nodes, 16 features, 8 mini-batches of 8 target nodes
numeric: the 8 steps' graphs stay reachable from total_loss at the end of the epoch
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class GNN(torch.nn.Module):
    def __init__(self, adj, d_in=16, d_hidden=32, n_classes=4):
        super().__init__()
        self.norm_adj = adj / adj.sum(1, keepdim=True)
        self.lin1 = torch.nn.Linear(2 * d_in, d_hidden)
        self.lin2 = torch.nn.Linear(2 * d_hidden, n_classes)

    def forward(self, x):
        h = torch.relu(self.lin1(torch.cat([x, self.norm_adj @ x], 1)))
        return self.lin2(torch.cat([h, self.norm_adj @ h], 1))


_gb.setup()
adj = (torch.rand(20, 20) < 0.2).float() + torch.eye(20)
features, node_labels = torch.randn(20, 16), torch.randint(0, 4, (20,))
model = GNN(adj)
_gb.start(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
total_loss = 0
for step in range(8):
    nodes = torch.randperm(20)[:8]
    y_pred = model(features)[nodes]
    loss = F.cross_entropy(y_pred, node_labels[nodes])
    opt.zero_grad()
    loss.backward()
    opt.step()
    total_loss += loss  # BUG
    # FIX: total_loss += loss.detach()
_gb.done(model, kept=[total_loss] if isinstance(total_loss, torch.Tensor) else [])
