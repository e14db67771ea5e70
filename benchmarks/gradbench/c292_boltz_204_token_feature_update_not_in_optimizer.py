"""Boltz-1's confidence training: the `out_token_feat_update` module is run with gradients enabled to compute the token representation the confidence module reads, but `configure_optimizers` does not pass its parameters to the optimizer, so it receives gradients and keeps its initial weights.

source: jwohlwend/boltz#204 (https://github.com/jwohlwend/boltz/issues/204), "About parameter updating of out_token_feat_update?": "in the configure_optimizers of the Boltz1 class, the parameters of out_token_feat_update are not passed to the optimizer ... which means that they will not be updated during confidence training"; a maintainer: "you are right, we had this fixed in our development repo, but this was somehow lost in the public repo". model.py and diffusion.py were not read beyond the issue's description; the structure trunk is reduced to a frozen MLP, out_token_feat_update to a linear layer on the token features, the confidence module to an MLP predicting a per-token confidence bin (cross-entropy over 8 bins); the Lightning module is written as a plain loop. The twin gives the optimizer the confidence module's and out_token_feat_update's parameters
family: orphan
shape: Adam(lr=1e-3), 16 tokens of 12 features per structure, 4 structures per batch, 4 steps
numeric: out_token_feat_update keeps its initial weights in the bug
watch: GG106
lint: out: which modules feed the loss is known only when the model runs
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Boltz1(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU())
        self.out_token_feat_update = torch.nn.Linear(16, 16)
        self.confidence_module = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
        for p in self.trunk.parameters():
            p.requires_grad_(False)

    def forward(self, feats):
        with torch.no_grad():
            token_s = self.trunk(feats)
        token_rep = token_s + self.out_token_feat_update(token_s)
        return self.confidence_module(token_rep)

    def configure_optimizers(self):
        params = list(self.confidence_module.parameters())  # BUG
        # FIX: params = list(self.confidence_module.parameters()) + list(self.out_token_feat_update.parameters())
        return torch.optim.Adam(params, lr=1e-3)


_gb.setup()
model = Boltz1()
_gb.start(model.out_token_feat_update, model.confidence_module)
optimizer = model.configure_optimizers()
for step in range(4):
    feats, bins = torch.randn(4, 16, 12), torch.randint(0, 8, (4, 16))
    loss = F.cross_entropy(model(feats).reshape(-1, 8), bins.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(model.out_token_feat_update, model.confidence_module)
