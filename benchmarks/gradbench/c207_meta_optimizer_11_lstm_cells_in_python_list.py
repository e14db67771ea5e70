"""pytorch-meta-optimizer: the `MetaOptimizer` keeps its `LayerNormLSTMCell`s in a plain Python list (`self.lstms.append(...)`), so their parameters are not registered with the module; the meta-optimizer's Adam is built on `meta_optimizer.parameters()` and never receives them, and the LSTM weights are never trained although gradients reach them.

source: ikostrikov/pytorch-meta-optimizer#11 (https://github.com/ikostrikov/pytorch-meta-optimizer/issues/11), "LSTM weights not optimised": "The `LayerNormLSTMCell` modules initialised in the `MetaOptimizer` class are not properly registered as parameters ... the current version will not train the LSTM weights at all", with the fix nn.Sequential(*[...]). A user (YanwenZhu): "This quick fix worked, thanks!" (open, no maintainer answer: unconfirmed). Read: the issue's two code references (meta_optimizer.py line 27 appending to self.lstms; main.py line 63 building the optimizer on meta_optimizer.parameters()). The meta-optimizer is reduced to its learned update rule (linear in, two LSTM cells, linear out, mapping each optimizee gradient to an update) trained by unrolling 4 optimizee steps on random quadratics; nn.LSTMCell stands for the layer-normalised cell. The twin keeps the cells in an nn.ModuleList, the issue's fix in spirit
family: orphan
shape: Adam(lr=1e-2) on meta_optimizer.parameters(); 5 meta-steps, each unrolling 4 optimizee steps on a 6-dimensional quadratic
numeric: the two LSTM cells (hidden size 8) never move; only the input and output layers learn
watch: GG106
lint: out: whether a module's layers are registered is decided by the container that holds them, when the module is built at run time
bug-step: 1
"""
import torch

import _gb


class MetaOptimizer(torch.nn.Module):
    def __init__(self, hidden_size=8, num_layers=2):
        super().__init__()
        self.hidden_size = hidden_size
        self.linear1 = torch.nn.Linear(1, hidden_size)
        self.lstms = []  # BUG
        # FIX: self.lstms = torch.nn.ModuleList()
        for _ in range(num_layers):
            self.lstms.append(torch.nn.LSTMCell(hidden_size, hidden_size))
        self.linear2 = torch.nn.Linear(hidden_size, 1)

    def forward(self, grad, states):
        x = torch.tanh(self.linear1(grad.unsqueeze(1)))
        new_states = []
        for lstm, state in zip(self.lstms, states):
            h, c = lstm(x, state)
            new_states.append((h, c))
            x = h
        return self.linear2(x).squeeze(1), new_states


def tracked(meta):
    """The weights the case follows, whether registered or not: input layer, LSTM cells, output layer."""
    return list(meta.linear1.parameters()) + [p for lstm in meta.lstms for p in lstm.parameters()] + list(meta.linear2.parameters())


_gb.setup()
meta_optimizer = MetaOptimizer()
_gb.start(*tracked(meta_optimizer))
optimizer = torch.optim.Adam(meta_optimizer.parameters(), lr=1e-2)
problems = [(torch.randn(6, 6), torch.randn(6)) for _ in range(5)]
for A, b in problems:
    Q = A @ A.t() / 6 + torch.eye(6)
    w = torch.zeros(6, requires_grad=True)
    states = [(torch.zeros(6, 8), torch.zeros(6, 8)) for _ in meta_optimizer.lstms]
    meta_loss = 0
    for _ in range(4):
        f = 0.5 * w @ Q @ w - b @ w
        g, = torch.autograd.grad(f, w, create_graph=True)
        update, states = meta_optimizer(g.detach(), states)
        w = w + update
        meta_loss = meta_loss + 0.5 * w @ Q @ w - b @ w
    optimizer.zero_grad()
    meta_loss.backward()
    optimizer.step()
_gb.done(*tracked(meta_optimizer))
