"""adapters (adapter-transformers) used without its Trainer: the script builds the optimizer on `model.parameters()` and only then calls `model.add_adapter(...)` and `model.train_adapter(...)`, which create the adapter's weights and freeze the base model, so the optimizer holds only frozen base weights: the adapter receives gradients but is in no optimizer and never updates.

source: adapter-hub/adapters#260 (https://github.com/adapter-hub/adapters/issues/260), "Train T5 with adapter without using Trainer Class didn't update the adapter's weight" (labelled question, closed). A maintainer (hSterz): "it looks like the optimizer is missing the adapter parameters. Try, to first add the adapter to the model with `model.add_adapter(args.task_name, config=adapter_config)` and then get the parameters for the optimizer. Otherwise, the optimizer is not updating the adapter weights." The user: "the issue is solved". The user's script was not shown beyond this; add_adapter and train_adapter are written anew with the library's semantics (a bottleneck adapter with a residual connection after the layer, its up-projection zero-initialised; train_adapter freezes everything but the adapter); T5 is reduced to a two-layer MLP encoder with a classification head. The twin builds the optimizer after add_adapter and train_adapter, the maintainer's fix
family: orphan
shape: AdamW(lr=1e-3); 6 steps on batches of 16
numeric: the adapter (about 200 weights) never moves and the frozen base does not either: no update at all
watch: GG106
lint: out: which parameters add_adapter creates is known only when it runs
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Adapter(torch.nn.Module):
    def __init__(self, dim, reduction=4):
        super().__init__()
        self.down = torch.nn.Linear(dim, dim // reduction)
        self.up = torch.nn.Linear(dim // reduction, dim)
        torch.nn.init.zeros_(self.up.weight)
        torch.nn.init.zeros_(self.up.bias)

    def forward(self, h):
        return h + self.up(torch.relu(self.down(h)))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh())
        self.head = torch.nn.Linear(16, 3)
        self.adapters = torch.nn.ModuleDict()
        self.active = None

    def add_adapter(self, name):
        self.adapters[name] = Adapter(16)

    def train_adapter(self, name):
        self.requires_grad_(False)
        self.adapters[name].requires_grad_(True)
        self.active = name

    def forward(self, x):
        h = self.encoder(x)
        if self.active is not None:
            h = self.adapters[self.active](h)
        return self.head(h)


_gb.setup()
model = Model()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # BUG
model.add_adapter("task")
model.train_adapter("task")
_gb.start(model)
# FIX: optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = [(torch.randn(16, 12), torch.randint(0, 3, (16,))) for _ in range(6)]
for x, y in data:
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(model)
