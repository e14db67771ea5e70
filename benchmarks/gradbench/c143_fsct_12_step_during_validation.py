"""FSCT scripts/train.py: the validation loop (after model.eval()) runs `optimizer.zero_grad(); loss.backward(); optimizer.step()` on every validation batch, so each epoch also trains the segmentation network on the validation set.

source: SKrisanski/FSCT#12 (https://github.com/SKrisanski/FSCT/issues/12), "Perform weight update during validation" (scripts/train.py#L337-L339 at 7f1bd48): "they normally do not perform optimizer.step() during the validation stage ... Is there a reason that we would perform optimizer.step() here?" The author (SKrisanski): "You are correct, it should not be doing this ... this is certainly a bug. I've just pushed a fix." Code read (train.py after the fix): the training loop (outputs = model(data); loss = criterion(outputs, data.y); optimizer.zero_grad(); loss.backward(); optimizer.step(); running_loss += loss.detach().item()) and the validation loop (model.eval(); outputs = model(data); loss = criterion(outputs, data.y); running_loss += loss.detach().item()); the three lines the issue points at are put back in the validation loop. The point-cloud network is reduced to a per-point MLP classifier. The twin is the fixed file
family: leaked-pass
shape: Adam(lr=2.5e-5 scaled to 1e-3 here); per epoch: model.train(); train loop as quoted; if perform_validation_during_training: model.eval(); validation loop as quoted with zero_grad, backward and step; 2 epochs of 6 training and 3 validation batches
numeric: each epoch applies 3 extra updates computed on validation batches
watch: out: a step on validation batches is an ordinary step from the gradient buffers' view (cleared, filled, applied once); which data may train the model is the program's intent
lint: out: an optimizer step in a loop that follows model.eval() is a training step on whatever data that loop reads; which loader holds validation data is not in the loop's text
bug-step: 7
"""
import torch
import torch.nn as nn

import _gb

_gb.setup()
model = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
_gb.start(model)
optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=1e-3)
criterion = nn.CrossEntropyLoss()
train_loader = [(torch.randn(64, 3), torch.randint(0, 4, (64,))) for _ in range(6)]
validation_loader = [(torch.randn(64, 3), torch.randint(0, 4, (64,))) for _ in range(3)]
for epoch in range(2):
    model.train()
    running_loss = 0.0
    for pos, y in train_loader:
        outputs = model(pos)
        loss = criterion(outputs, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running_loss += loss.detach().item()
    model.eval()
    running_loss = 0.0
    for pos, y in validation_loader:
        outputs = model(pos)
        loss = criterion(outputs, y)
        optimizer.zero_grad()  # BUG
        loss.backward()  # BUG
        optimizer.step()  # BUG
        running_loss += loss.detach().item()
_gb.done(model)
