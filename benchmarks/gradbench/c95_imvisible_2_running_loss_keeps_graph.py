"""ImVisible training loop: the epoch's running losses are summed from the loss tensors, so every batch's graph stays alive.

source: samuelyu2002/ImVisible#2 (https://github.com/samuelyu2002/ImVisible/issues/2); the author: "Try changing all of the places with += loss into += loss.item(). For example, change lines 97-99 into: running_loss += loss.item(); running_loss_MSE += MSE.item(); running_loss_cross_entropy += cross_entropy.item() ... The problem might be because the computational graphs were also being stored, taking up large amounts of RAM."; the reporter: "Yes, that was it, now it works fine."; the author: "I see that you committed the changes" (fixed in the repository)
family: graph-logging
shape: for i, data in enumerate(train_loader): pred, direc = model(image); MSE = mse(direc, coords); cross_entropy = ce(pred, label); loss = MSE + cross_entropy; optimizer.zero_grad(); loss.backward(); optimizer.step(); running_loss += loss; running_loss_MSE += MSE; running_loss_cross_entropy += cross_entropy
numeric: the three running sums reach one graph per batch of the epoch (the process ran out of RAM in the issue)
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class LytNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU())
        self.cls = torch.nn.Linear(24, 5)
        self.direction = torch.nn.Linear(24, 4)

    def forward(self, x):
        h = self.body(x)
        return self.cls(h), self.direction(h)


_gb.setup()
model = LytNet()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
train_loader = [(x, (x[:, 0] > 0).long() * 2, torch.tanh(x[:, :4])) for x in (torch.randn(8, 16) for _ in range(12))]
running_loss = running_loss_MSE = running_loss_cross_entropy = 0.0
for i, (image, label, coords) in enumerate(train_loader):
    pred, direc = model(image)
    MSE = F.mse_loss(direc, coords)
    cross_entropy = F.cross_entropy(pred, label)
    loss = MSE + cross_entropy
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running_loss += loss  # BUG
    running_loss_MSE += MSE  # BUG
    running_loss_cross_entropy += cross_entropy  # BUG
    # FIX: running_loss += loss.item()
    # FIX: running_loss_MSE += MSE.item()
    # FIX: running_loss_cross_entropy += cross_entropy.item()
_gb.done(model, kept=[running_loss, running_loss_MSE, running_loss_cross_entropy])
