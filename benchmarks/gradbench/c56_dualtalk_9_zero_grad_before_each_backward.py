"""DualTalk main.py: zero_grad before every backward while the step runs every gradient_accumulation_steps iterations.

source: ZiqiaoPeng/DualTalk#9 (https://github.com/ZiqiaoPeng/DualTalk/issues/9), "Gradient accumulation": main.py lines 59-64 call optimizer.zero_grad() before each loss.backward() and step when i % gradient_accumulation_steps == 0 (open issue; the mechanism is checked by running it here)
family: misplaced-clear
shape: optimizer.zero_grad(); loss.backward(); loss_log.append(loss.item()); if i % args.gradient_accumulation_steps == 0: optimizer.step(); optimizer.zero_grad()
numeric: every update applies the one micro-batch just back-propagated; the other iterations' gradients are discarded
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 6))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
gradient_accumulation_steps = 2
loss_log = []
train_loader = [torch.randn(4, 6) for _ in range(8)]
for i, audio in enumerate(train_loader):
    optimizer.zero_grad()  # BUG
    loss = F.mse_loss(model(audio), audio)
    # FIX: loss = loss / gradient_accumulation_steps
    loss.backward()
    loss_log.append(loss.item())
    if i % gradient_accumulation_steps == 0:  # BUG
    # FIX: if (i + 1) % gradient_accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
