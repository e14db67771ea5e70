"""Accelerate's "explore" guide: optimizer.zero_grad() at the top of each iteration under gradient accumulation.

source: huggingface/accelerate#1299 (https://github.com/huggingface/accelerate/issues/1299), "when use gradient_accumulation, optimizer.zero_grad() must be put to the end of a training iteration": the demo at usage_guides/explore puts it at the beginning "and will discard previous accumulated gradient" (open)
family: misplaced-clear
shape: for batch in dataloader: optimizer.zero_grad(); inputs, targets = batch; with accelerator.accumulate(model): outputs = model(inputs); loss = loss_function(outputs, targets); accelerator.backward(loss); optimizer.step(); scheduler.step()
numeric: each update applies the last micro-batch of the window (divided by K by Accelerate)
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F
from accelerate import Accelerator

import _gb

_gb.setup()
accelerator = Accelerator(gradient_accumulation_steps=2, cpu=True)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100)
dataloader = [(torch.randn(6, 4), torch.randint(0, 2, (6,))) for _ in range(8)]
model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
for batch in dataloader:
    optimizer.zero_grad()  # BUG
    inputs, targets = batch
    with accelerator.accumulate(model):
        outputs = model(inputs)
        loss = F.cross_entropy(outputs, targets)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        # FIX: optimizer.zero_grad()
_gb.done(model)
