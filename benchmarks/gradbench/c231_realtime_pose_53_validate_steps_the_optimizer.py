"""pytorch_Realtime_Multi-Person_Pose_Estimation's `train_VGG19.py`: the `validate()` function, run after each training epoch, computes the loss on the validation batches and then calls `optimizer.zero_grad()`, `total_loss.backward()` and `optimizer.step()`, so validation also trains the network (and the ReduceLROnPlateau schedule is driven by a loss the network is being fitted to).

source: tensorboy/pytorch_Realtime_Multi-Person_Pose_Estimation#53 (https://github.com/tensorboy/pytorch_Realtime_Multi-Person_Pose_Estimation/issues/53), "questions about training and validation data": "in train_VGG19.py, the validation also backwards the val_loss (actually also \"training\") ... in train_VGG19, function validate(): losses.update(total_loss.item(), img.size(0)); # compute gradient and do SGD step; optimizer.zero_grad(); total_loss.backward(); optimizer.step()". The maintainer (tensorboy): "I updated the `validate()` function now." The script was not read beyond the quoted lines; the VGG19 pose network is reduced to an MLP regressing part-affinity and heatmap targets. The twin's validate() computes the loss under torch.no_grad() without backward or step, the maintainer's update
family: leaked-pass
shape: SGD(lr=0.05, momentum=0.9); 2 epochs of 4 train and 2 validation batches of 8
numeric: each epoch applies 2 extra optimizer steps on validation batches
watch: out: validation batches are cleared, backpropagated and stepped exactly like training batches; which data a step may train on is the program's intent
lint: out: a clear, backward and step in a function called validate is an ordinary training step; what the function is for is its name, not its gradient handling
bug-step: 5
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
train_batches = [(torch.randn(8, 20), torch.rand(8, 12)) for _ in range(4)]
val_batches = [(torch.randn(8, 20), torch.rand(8, 12)) for _ in range(2)]
model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 12))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train(batches):
    model.train()
    for img, target in batches:
        total_loss = F.mse_loss(model(img), target)
        optimizer.zero_grad()
        total_loss.backward()
        optimizer.step()


def validate(batches):
    model.eval()
    losses = []
    for img, target in batches:
        total_loss = F.mse_loss(model(img), target)  # BUG
        # FIX: with torch.no_grad():
        # FIX:     total_loss = F.mse_loss(model(img), target)
        losses.append(total_loss.item())
        optimizer.zero_grad()  # BUG
        total_loss.backward()  # BUG
        optimizer.step()  # BUG
    return sum(losses) / len(losses)


for epoch in range(2):
    train(train_batches)
    validate(val_batches)
_gb.done(model)
