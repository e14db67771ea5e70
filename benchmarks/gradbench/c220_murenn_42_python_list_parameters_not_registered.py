"""murenn's MuReNNDirect: the layer keeps its per-octave convolutions in plain Python lists instead of `torch.nn.ModuleList` / `torch.nn.ParameterList`, so their parameters are not registered with the module: `parameters()` does not return them and an optimizer built on the module never trains them, although the forward pass uses them and they receive gradients.

source: kymatio/murenn#42 (https://github.com/kymatio/murenn/issues/42), "`MuReNNDirect`: Python list in `torch.nn.Module`" (labelled bug, closed): "fix bug: use `torch.nn.ParameterList`, `torch.nn.ModuleList` instead of Python lists in `MuReNNDirect`". The layer was not read: it is reduced to what the issue names, a module applying one learnable Conv1d per octave to the octave's band (a fixed average-pooling pyramid stands for the dual-tree wavelet transform) and summing the pooled outputs, trained as a regressor. The twin keeps the convolutions in a torch.nn.ModuleList, the fix
family: orphan
shape: Adam(lr=1e-2) on the module's parameters and a linear readout; 6 steps on batches of 8 signals of 64 samples, J = 3 octaves
numeric: the 3 per-octave convolutions never move; only the readout learns
watch: GG106
lint: out: whether a module's layers are registered is decided by the container that holds them, when the module is built at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class MuReNNDirect(torch.nn.Module):
    def __init__(self, J=3, Q=4):
        super().__init__()
        self.J = J
        down = []  # BUG
        # FIX: down = torch.nn.ModuleList()
        for j in range(J):
            down.append(torch.nn.Conv1d(1, Q, kernel_size=5, padding=2, bias=False))
        self.down = down

    def forward(self, x):
        outs = []
        for j in range(self.J):
            band = F.avg_pool1d(x, 2 ** j) if j else x
            outs.append(self.down[j](band).mean(-1))
        return torch.cat(outs, 1)


def tracked(layer, readout):
    """The weights the case follows, whether registered or not."""
    return [p for conv in layer.down for p in conv.parameters()] + list(readout.parameters())


_gb.setup()
layer = MuReNNDirect()
readout = torch.nn.Linear(12, 1)
_gb.start(*tracked(layer, readout))
optimizer = torch.optim.Adam(list(layer.parameters()) + list(readout.parameters()), lr=1e-2)
data = [(x, x.pow(2).mean(-1)) for x in (torch.randn(8, 1, 64) for _ in range(6))]
for x, y in data:
    optimizer.zero_grad()
    F.mse_loss(readout(layer(x)), y).backward()
    optimizer.step()
_gb.done(*tracked(layer, readout))
