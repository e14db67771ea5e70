"""OpenPCDet's `adam_onecycle` optimizer: `build_optimizer` gathers the parameter groups with `flatten_model`, which keeps only leaf modules (modules without children), so an `nn.Parameter` attached directly to a module that also has children never enters the optimizer: it receives gradients but keeps its initial value.

source: open-mmlab/OpenPCDet#960 (https://github.com/open-mmlab/OpenPCDet/issues/960), "Optimizer neglection when using nn.Parameter and 'adam_one_cycle'": "when building optimizer in 'adam_one_cycle' manner, only parameters in the leaf module are added to the optimizer parameter groups. I have tried a `nn.Parameter()` in a non-leaf module, but it is not optimized since the building implementation in line 26~32" and "just wrap `nn.Parameters` with a Subclass of `nn.Module`, and return it in `forward`" (closed as stale; no maintainer reply). tools/train_utils/optimization/__init__.py was not read: flatten_model and the group construction follow the issue's description (children() recursion, leaf modules collected into one group); the fastai OneCycle wrapper is reduced to Adam; the detector to a backbone and head with a learnable fusion scale on the parent module. The twin wraps the scale in a leaf module, the reporter's workaround
family: orphan
shape: Adam(lr=3e-3); 6 steps on batches of 16
numeric: the learnable scale never moves from 1.0
watch: GG106
lint: out: which modules are leaves is decided when the model is built, at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class ScaleModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self):
        return self.scale


class Detector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU())
        self.head = torch.nn.Linear(16, 3)
        self.scale = torch.nn.Parameter(torch.ones(1))  # BUG
        # FIX: self.scale_module = ScaleModule()

    def fusion_scale(self):
        return self.scale  # BUG
        # FIX: return self.scale_module()

    def forward(self, x):
        return self.head(self.backbone(x) * self.fusion_scale())


def flatten_model(m):
    children = list(m.children())
    return sum(map(flatten_model, children), []) if len(children) else [m]


_gb.setup()
data = [(torch.randn(16, 10), torch.randint(0, 3, (16,))) for _ in range(6)]
model = Detector()
_gb.start(model.backbone, model.head, model.fusion_scale())
layer_groups = [torch.nn.Sequential(*flatten_model(model))]
optimizer = torch.optim.Adam([p for group in layer_groups for p in group.parameters()], lr=3e-3)
for x, y in data:
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
_gb.done(model.backbone, model.head, model.fusion_scale())
