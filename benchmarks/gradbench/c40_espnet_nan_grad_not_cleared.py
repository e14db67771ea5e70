"""ESPnet trainer: a window whose gradient is not finite is skipped, but its gradient is not cleared.

source: espnet/espnet#3283 (https://github.com/espnet/espnet/pull/3283), "Bug fix of accum_grad when grad-nan": "optimizer.zero_grad() is not invoked when the gradient is nan and accum_grad>1. This is a fatal bug of #3014"
family: missing-clear
shape: every accum_grad iterations: grad_norm = clip_grad_norm_(...); if not torch.isfinite(grad_norm): log and skip the step; else optimizer.step(); the zero_grad() sat in the else branch
numeric: the skipped window's NaN stays in .grad, every later window adds to it, and each later step is skipped too: training silently stops
watch: GG102 GG103
lint: out: the clearing exists on the normal path; whether the skip path runs depends on the data
bug-step: 2
"""
import torch

import _gb

_gb.setup()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
_gb.start(model)
accum_grad = 2
for iiter in range(1, 11):
    x, y = torch.randn(4, 4), torch.randn(4, 1)
    if iiter == 3:
        x[0, 0] = float("inf")  # one corrupt utterance
    loss = ((model(x) - y) ** 2).mean() / accum_grad
    loss.backward()
    if iiter % accum_grad == 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 100.0)
        if not torch.isfinite(grad_norm):
            print(f"The grad norm is {grad_norm}. Skipping updating the model.")
            # FIX: optimizer.zero_grad()
        else:
            optimizer.step()
            optimizer.zero_grad()
_gb.done(model)
