"""TennisCourtDetector base trainer without optimizer.zero_grad().

source: yastrebksv/TennisCourtDetector#7 (https://github.com/yastrebksv/TennisCourtDetector/issues/7), "Why there is no optimizer.zero_grad() in base_trainer.py?"; the author confirmed and fixed it
family: missing-clear
shape: a heatmap regression train(model, loader, optimizer, criterion) with MSE on keypoint heatmaps; backward and step, no clearing
numeric: heatmap gradients accumulate over the whole epoch; each step applies their running sum
watch: GG101
lint: GG101
bug-step: 2
"""
import torch

import _gb


def train(model, train_loader, optimizer, criterion):
    model.train()
    losses = []
    for inp, gt_hm in train_loader:
        out = model(inp)
        loss = criterion(torch.sigmoid(out), gt_hm)
        # FIX: optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(4, 3, 3, padding=1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
_gb.start(model)
loader = [(torch.randn(2, 1, 8, 8), torch.rand(2, 3, 8, 8)) for _ in range(5)]
train(model, loader, optimizer, torch.nn.MSELoss())
_gb.done(model)
