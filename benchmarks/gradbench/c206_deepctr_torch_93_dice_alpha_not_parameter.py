"""DeepCTR-Torch's Dice activation (used by DIN's attention): `alpha` is created as a plain tensor (`torch.zeros((emb_size,)).to(device)`) instead of an `nn.Parameter`, so it is not among `model.parameters()`, the optimizer never receives it and the learnable rectifier slope stays at 0 while the rest of the model trains.

source: shenweichen/DeepCTR-Torch#93 (https://github.com/shenweichen/DeepCTR-Torch/issues/93), "alpha should be wrappered with Parameter in Dice": "As model.parameters() used in optim, alpha in Dice should use nn.parameter.Parameter to wrapper ... Otherwise this paramter will fix to init value in the training process." A maintainer (ZhangYuef): "I realize it should be `nn.parameter.Parameter` for `alpha` since `alpha` is learnable"; fixed in v0.2.4. The Dice module is written from the issue and the DIN paper (batch-norm probability p = sigmoid(bn(x)), output p * x + (1 - p) * alpha * x); the DIN model is reduced to an MLP with one Dice layer on a click label. The twin wraps alpha in nn.Parameter, the fix
family: orphan
shape: Adam(lr=1e-2) on model.parameters(); 8 steps on batches of 32
numeric: the Dice slope alpha (16 values) stays 0 instead of training
watch: out: a tensor that is not a parameter gets no gradient; nothing in the gradient buffers is stale, lost or applied twice
lint: out: whether a tensor is registered as a parameter is decided by how it is wrapped when the module is built, at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Dice(torch.nn.Module):
    def __init__(self, emb_size, epsilon=1e-8):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(emb_size, eps=epsilon)
        self.sigmoid = torch.nn.Sigmoid()
        self.alpha = torch.zeros((emb_size,))  # BUG
        # FIX: self.alpha = torch.nn.Parameter(torch.zeros((emb_size,)))

    def forward(self, x):
        x_p = self.sigmoid(self.bn(x))
        return self.alpha * (1 - x_p) * x + x_p * x


class DIN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(10, 16)
        self.dice = Dice(16)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.out(self.dice(self.fc1(x)))


def tracked(model):
    """The weights the case follows: the network's parameters and the Dice slope, whether registered or not."""
    return [p for p in model.parameters() if p is not model.dice.alpha] + [model.dice.alpha]


_gb.setup()
model = DIN()
_gb.start(*tracked(model))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
data = [(x, (x[:, 0] * x[:, 1] > 0).unsqueeze(1)) for x in (torch.randn(32, 10) for _ in range(8))]
for x, y in data:
    optimizer.zero_grad()
    F.binary_cross_entropy_with_logits(model(x), y.to(x.dtype)).backward()
    optimizer.step()
_gb.done(*tracked(model))
