"""texar-pytorch's `MergeLayer`: the parallel sub-layers whose outputs are merged are kept in a plain Python list instead of an `nn.ModuleList`, so their parameters are not registered with the layer: they receive gradients but an optimizer built on the model's parameters never updates them.

source: asyml/texar-pytorch#72 (https://github.com/asyml/texar-pytorch/issues/72), "Missing trainable variables from MergeLayer" (labelled bug, priority: high): "in MergeLayer here: https://github.com/asyml/texar-pytorch/blob/master/texar/core/layers.py#L638 we may want to use a nn.ModuleList instead of python list, thus the layer parameters can be accessable." layers.py was not read: MergeLayer is written with the issue's container (sub-layers applied to the same input, outputs concatenated), followed by a linear classifier. The twin holds the sub-layers in an nn.ModuleList, the issue's fix
family: orphan
shape: Adam(lr=1e-3); 6 steps on batches of 16
numeric: the three merged sub-layers (about 400 weights) never move; only the classifier trains
watch: GG106
lint: out: whether a module's layers are registered is decided by the container that holds them, when the module is built at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class MergeLayer(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self._layers = list(layers)  # BUG
        # FIX: self._layers = torch.nn.ModuleList(layers)

    def forward(self, x):
        return torch.cat([torch.tanh(layer(x)) for layer in self._layers], dim=-1)


_gb.setup()
data = [(torch.randn(16, 10), torch.randint(0, 4, (16,))) for _ in range(6)]
merge = MergeLayer([torch.nn.Linear(10, 12) for _ in range(3)])
classifier = torch.nn.Linear(36, 4)
model = torch.nn.Sequential(merge, classifier)
_gb.start(*merge._layers, classifier)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for x, y in data:
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
_gb.done(*merge._layers, classifier)
