"""zero_grad() before every micro-batch of an accumulation window (the Opacus CIFAR-10 tutorial).

source: meta-pytorch/opacus#93 (https://github.com/meta-pytorch/opacus/issues/93), "Problem with zero_grad() and virtual_step() in the tutorials"
family: misplaced-clear
shape: for i, (x, y) in enumerate(loader): optimizer.zero_grad(); loss.backward(); step on every n_acc-th batch, virtual_step() otherwise. Written with plain PyTorch (virtual_step() only stashed the clipped per-sample gradients): the clearing at the top of every iteration erases what the window accumulated
numeric: each step applies only the window's last micro-batch, divided by the window size: 1/n_acc of one batch instead of the window mean
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
_gb.start(model)
n_acc_steps = 4
data, target = torch.randn(96, 12), torch.randint(0, 4, (96,))
for i in range(24):
    x, y = data[i * 4:(i + 1) * 4], target[i * 4:(i + 1) * 4]
    optimizer.zero_grad()  # BUG
    loss = F.cross_entropy(model(x), y) / n_acc_steps
    loss.backward()
    if (i + 1) % n_acc_steps == 0:
        optimizer.step()
        # FIX: optimizer.zero_grad()
_gb.done(model)
