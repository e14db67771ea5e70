"""pytorch_Realtime_Multi-Person_Pose_Estimation train_VGG19.py: validate() computes the validation loss and then runs `optimizer.zero_grad(); total_loss.backward(); optimizer.step()`, so every validation pass trains the pose network on the validation images (and ReduceLROnPlateau then watches a loss the model was just fitted to).

source: tensorboy/pytorch_Realtime_Multi-Person_Pose_Estimation#53 (https://github.com/tensorboy/pytorch_Realtime_Multi-Person_Pose_Estimation/issues/53), "questions about training and validation data": "in train_VGG19.py, the validation also backwards the val_loss (actually also 'training') ... Should validation only calculates the val_loss but not backwards loss?", quoting validate(): losses.update(total_loss.item(), img.size(0)); # compute gradient and do SGD step; optimizer.zero_grad(); total_loss.backward(); optimizer.step(). The author (tensorboy): "I updated the validate() function now." The code was not read beyond the quote: train() and validate() follow the quoted lines (the same loss, get_loss summing the heatmap and PAF MSE of every stage), with the module-level optimizer both use; the VGG19 two-branch network is reduced to a conv trunk with a heatmap and a PAF head. The twin drops the three lines, as the update did
family: leaked-pass
shape: for epoch in range(2): train(train_loader, model, optimizer); val_loss = validate(val_loader, model); lr_scheduler.step(val_loss). SGD(lr=0.01, momentum=0.9, weight_decay=5e-4), ReduceLROnPlateau; 5 training and 2 validation batches per epoch
numeric: each epoch applies 2 extra updates computed on validation images
watch: out: a step on validation batches is an ordinary step from the gradient buffers' view (cleared, filled, applied once); which data may train the model is the program's intent
lint: out: the validation function's step is a training step on whatever its loader holds; which loader holds validation data is not in the function's text
bug-step: 6
"""
import torch
import torch.nn as nn
from torch.optim.lr_scheduler import ReduceLROnPlateau

import _gb


class PoseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.heatmap = nn.Conv2d(8, 4, 1)
        self.paf = nn.Conv2d(8, 6, 1)

    def forward(self, img):
        h = self.trunk(img)
        saved_for_loss = [self.heatmap(h), self.paf(h)]
        return saved_for_loss[-1], saved_for_loss


def get_loss(saved_for_loss, heat_temp, vec_temp):
    criterion = nn.MSELoss()
    total_loss = criterion(saved_for_loss[0], heat_temp) + criterion(saved_for_loss[1], vec_temp)
    return total_loss, {"total": total_loss.item()}


def train(train_loader, model, optimizer):
    model.train()
    for img, heatmap_target, paf_target in train_loader:
        _, saved_for_loss = model(img)
        total_loss, saved_for_log = get_loss(saved_for_loss, heatmap_target, paf_target)
        optimizer.zero_grad()
        total_loss.backward()
        optimizer.step()


def validate(val_loader, model):
    total = 0.0
    model.eval()
    for img, heatmap_target, paf_target in val_loader:
        _, saved_for_loss = model(img)
        total_loss, saved_for_log = get_loss(saved_for_loss, heatmap_target, paf_target)
        total += total_loss.item()
        # compute gradient and do SGD step
        optimizer.zero_grad()  # BUG
        total_loss.backward()  # BUG
        optimizer.step()  # BUG
    return total / len(val_loader)


def batches(n):
    return [(torch.randn(2, 3, 8, 8), torch.rand(2, 4, 8, 8), torch.randn(2, 6, 8, 8)) for _ in range(n)]


_gb.setup()
model = PoseNet()
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
lr_scheduler = ReduceLROnPlateau(optimizer, mode="min", factor=0.8, patience=0)
train_loader, val_loader = batches(5), batches(2)
for epoch in range(2):
    train(train_loader, model, optimizer)
    val_loss = validate(val_loader, model)
    lr_scheduler.step(val_loss)
_gb.done(model)
