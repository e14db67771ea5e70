"""pose-ae-train (associative embedding): the epoch loop runs `train_func(batch_id + i, config, phase, **datas)` for `phase in ['train', 'val']`, and the task's `make_train` ignores the phase for anything but 'inference': it computes the loss, clears, backpropagates and steps the optimizer for the validation batches too, so the network is trained on the validation data after every training phase.

source: princeton-vl/pose-ae-train#11 (https://github.com/princeton-vl/pose-ae-train/issues/11), "strange behaviours on validation data": "I found the loss decreasing when the network is passing through validation data ... if phase != 'inference': # No phase variable is used here ... So in my opinion, data in validation phase is also trained as those in the training phase." (closed); pull request #20 refers to the "previous PR which try to fix 'train on validation data'". train.py and task/pose.py were not read beyond the issue's excerpt: make_train is written with the issue's branch structure; the stacked hourglass is reduced to a small MLP heatmap regressor on random features. The twin trains only when phase == 'train' and computes the validation loss under torch.no_grad()
family: leaked-pass
shape: Adam(lr=1e-3); 2 epochs of 4 train and 2 val batches of 8
numeric: each epoch applies 2 extra optimizer steps on validation batches
watch: out: validation batches are cleared, backpropagated and stepped exactly like training batches; which data a step may train on is the program's intent
lint: out: the training function is called for both phases with the phase as a value; which phase trains is decided at run time
bug-step: 5
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
splits = {phase: [(torch.randn(8, 16), torch.rand(8, 10)) for _ in range(n)] for phase, n in (("train", 4), ("val", 2))}
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
_gb.start(net)
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)


def make_train(batch_id, phase, imgs, heatmaps):
    if phase != "inference":
        # FIX: if phase != "train":
        # FIX:     with torch.no_grad():
        # FIX:         return F.mse_loss(net(imgs), heatmaps).item()
        loss = F.mse_loss(net(imgs), heatmaps)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()


for epoch in range(2):
    for phase in ("train", "val"):
        for i, (imgs, heatmaps) in enumerate(splits[phase]):
            make_train(epoch * 4 + i, phase, imgs, heatmaps)
_gb.done(net)
