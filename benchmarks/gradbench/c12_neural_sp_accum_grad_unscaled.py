"""neural_sp ASR training: accumulated loss not divided by the accumulation count.

source: hirofumi0810/neural_sp#168 (https://github.com/hirofumi0810/neural_sp/issues/168), "accum_grad loss error": "should divide loss by accum_grad_n_steps"; fixed in #169/#170
family: unscaled
shape: loss, observation = model(batch); loss.backward(); the optimizer steps every accum_grad_n_steps batches; the mean loss is not divided by accum_grad_n_steps
numeric: the step's gradient is accum_grad_n_steps times the window mean (here 4x); with Adam the effective step hardly changes, with SGD it is 4x too large
watch: GG104
lint: GG104
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.GRU(6, 8, batch_first=True)
head = torch.nn.Linear(8, 5)
params = list(model.parameters()) + list(head.parameters())
optimizer = torch.optim.SGD(params, lr=0.1)
_gb.start(model, head)
accum_grad_n_steps = 4
accum_n_steps = 0
for step in range(12):
    xs, ys = torch.randn(3, 7, 6), torch.randint(0, 5, (3, 7))
    out, _ = model(xs)
    loss = F.cross_entropy(head(out).flatten(0, 1), ys.flatten())
    loss.backward()  # BUG
    # FIX: (loss / accum_grad_n_steps).backward()
    accum_n_steps += 1
    if accum_n_steps >= accum_grad_n_steps:
        optimizer.step()
        optimizer.zero_grad()
        accum_n_steps = 0
_gb.done(model, head)
