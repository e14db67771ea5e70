"""SuperVLAD train.py: the cross-image encoder's parameters are given both to the main `Adam(model.parameters())` and to their own `optim_encoder`; after the encoder's optimizer steps, the script sets the encoder's requires_grad to False, but the gradients it just applied are still in `.grad`, so the main optimizer applies them a second time on the first step (and the encoder is never updated again).

source: Lu-Feng/SuperVLAD#1 (https://github.com/Lu-Feng/SuperVLAD/issues/1), open: the reporter points out that the cross-image encoder's parameters are in both optimizers and are therefore updated twice in the first iteration, after which their requires_grad is switched off. train.py was read in outline; the backbone is reduced to an MLP over 32 features, the cross-image encoder to a linear layer mixing the batch's descriptors, the triplet loss to a margin loss on the mixed descriptors. Both optimizers are stepped after one backward, as in the script. The twin gives the main optimizer only the parameters outside the encoder, so the encoder's one step is applied once
family: wrong-optimizer
shape: Adam(lr=1e-3) on the model, Adam(lr=1e-3) on the encoder, 4 iterations of 16 samples; the encoder's requires_grad is switched off after the first iteration
numeric: the encoder's first (and only) update is applied twice, by two Adam states
watch: GG101
lint: out: which optimizers hold the same parameters is decided by module iterators evaluated when the optimizers are built
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
        self.crossimage = torch.nn.Linear(16, 16)

    def forward(self, x):
        d = self.backbone(x)
        return F.normalize(d + self.crossimage(d - d.mean(0, keepdim=True)), dim=1)


_gb.setup()
model = Model()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # BUG
# FIX: optimizer = torch.optim.Adam([p for n, p in model.named_parameters() if not n.startswith("crossimage.")], lr=1e-3)
optim_encoder = torch.optim.Adam(model.crossimage.parameters(), lr=1e-3)
for it in range(4):
    query, positive, negative = torch.randn(16, 32), torch.randn(16, 32), torch.randn(16, 32)
    q, p, n = model(query), model(positive), model(negative)
    loss = F.relu((q - p).pow(2).sum(1) - (q - n).pow(2).sum(1) + 0.1).mean()
    optimizer.zero_grad()
    optim_encoder.zero_grad()
    loss.backward()
    optim_encoder.step()
    if it == 0:
        for param in model.crossimage.parameters():
            param.requires_grad = False
    optimizer.step()
_gb.done(model)
