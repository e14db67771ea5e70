"""packnet-sfm: the loss tensor appended to the list of training outputs.

source: TRI-ML/packnet-sfm#51 (https://github.com/TRI-ML/packnet-sfm/pull/51), "Fix memory leak": "Detach loss before appending it to the training output list"
family: graph-logging
shape: output = model(batch); output['loss'].backward(); step; outputs.append({'loss': output['loss']}) for the epoch-end metrics
numeric: one graph root per batch stays referenced from the outputs list until the epoch ends
watch: out: no gradient is wrong; the run-time watch checks .grad buffers, not logging tensors
lint: out: the loss is kept through a dict put in a list, not an arithmetic sum (the rule looks for sums)
bug-step: end
"""
import torch

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(4, 1, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
_gb.start(model)
outputs = []
for i in range(10):
    image, depth = torch.randn(1, 3, 12, 12), torch.rand(1, 1, 12, 12)
    output = {"loss": (model(image) - depth).abs().mean()}
    optimizer.zero_grad()
    output["loss"].backward()
    optimizer.step()
    outputs.append({"loss": output["loss"]})  # BUG
    # FIX: outputs.append({"loss": output["loss"].detach()})
_gb.done(model, kept=[o["loss"] for o in outputs])
