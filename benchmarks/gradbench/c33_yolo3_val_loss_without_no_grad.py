"""yolo3-pytorch: training and validation losses summed as tensors; validation runs with autograd on.

source: bubbliiiing/yolo3-pytorch#3 (https://github.com/bubbliiiing/yolo3-pytorch/issues/3), "loss accumulation may cause GPU memory overflow": total_loss += loss and val_loss += loss should use loss.item()
family: graph-logging
shape: in the validation part of fit_one_epoch, outputs = net(images); loss = yolo_loss(outputs, targets); val_loss += loss, with no torch.no_grad() and no backward
numeric: every validation batch's whole graph, activations included, stays alive through val_loss until the epoch ends: memory grows linearly with the number of batches
watch: out: no gradient is wrong; the run-time watch checks .grad buffers, not logging tensors
lint: GG201
bug-step: end
"""
import torch

import _gb

_gb.setup()
net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
_gb.start(net)
total_loss, val_loss = 0, 0
for iteration in range(4):
    images, targets = torch.randn(2, 3, 16, 16), torch.randn(2, 4, 16, 16)
    optimizer.zero_grad()
    loss = ((net(images) - targets) ** 2).mean()
    loss.backward()
    optimizer.step()
    total_loss += loss.item()
net.eval()
for iteration in range(8):
    images, targets = torch.randn(2, 3, 16, 16), torch.randn(2, 4, 16, 16)
    outputs = net(images)
    loss = ((outputs - targets) ** 2).mean()
    val_loss += loss  # BUG
    # FIX: val_loss += loss.item()
_gb.done(net, kept=val_loss)
