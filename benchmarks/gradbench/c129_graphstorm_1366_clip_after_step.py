"""GraphStorm node-prediction trainer: `clip_grad_norm_` for `--max-grad-norm` runs after `optimizer.step()`, so the option never limits an update.

source: awslabs/graphstorm#1366 (https://github.com/awslabs/graphstorm/issues/1366), "possible max_grad_norm implementation error": "Clipping is currently applied after the optimizer step. The gradient clipping code controlled by the max-grad-norm cli param should be implemented between the backward and step calls" (python/graphstorm/trainer/np_trainer.py#L214-L221). The proposed fixes (#1382, #1383) quote the code: self.optimizer.zero_grad(); loss.backward(); rt_profiler.record('train_backward'); self.optimizer.step(); rt_profiler.record('train_step'); if max_grad_norm is not None: th.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm, grad_norm_type) — "--max-grad-norm silently does nothing". The issue is open and both pull requests were closed without merge (unconfirmed). The GNN is reduced to an MLP over node features (no graph sampling, no profiler); the twin clips between backward and step, as #1382 does
family: clip-misplaced
shape: for i, (input_nodes, seeds, blocks) in enumerate(train_loader): logits = model(...); loss = model.loss_func(logits, lbl); self.optimizer.zero_grad(); loss.backward(); self.optimizer.step(); if max_grad_norm is not None: th.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm, grad_norm_type). max_grad_norm = 0.5, grad_norm_type = 2.0, Adam, 8 batches per epoch, 2 epochs
numeric: every update whose gradient norm exceeds 0.5 uses the unclipped gradient
watch: GG116
lint: GG116
bug-step: 1
"""
import torch as th
import torch.nn.functional as F

import _gb


class GSgnnNodeModel(th.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = th.nn.Sequential(th.nn.Linear(12, 32), th.nn.ReLU())
        self.decoder = th.nn.Linear(32, 4)

    def forward(self, feats):
        return self.decoder(self.encoder(feats))

    def loss_func(self, logits, lbl):
        return F.cross_entropy(logits, lbl)


_gb.setup()
model = GSgnnNodeModel()
_gb.start(model)
optimizer = th.optim.Adam(model.parameters(), lr=1e-3)
max_grad_norm, grad_norm_type = 0.5, 2.0
train_loader = [(f, f[:, :4].argmax(1)) for f in (4 * th.randn(16, 12) for _ in range(8))]
for epoch in range(2):
    for i, (feats, lbl) in enumerate(train_loader):
        logits = model(feats)
        loss = model.loss_func(logits, lbl)
        optimizer.zero_grad()
        loss.backward()
        # FIX: if max_grad_norm is not None:
        # FIX:     th.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm, grad_norm_type)
        optimizer.step()
        if max_grad_norm is not None:  # BUG
            th.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm, grad_norm_type)  # BUG
_gb.done(model)
