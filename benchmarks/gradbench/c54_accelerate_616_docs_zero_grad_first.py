"""Accelerate's gradient-accumulation guide: optimizer.zero_grad() written first inside accelerator.accumulate.

source: huggingface/accelerate#616 (https://github.com/huggingface/accelerate/issues/616), "Gradient Accumulation Documentation has optimizer.zero_grad() at wrong step" (labels: bug, documentation); the feature's PR huggingface/accelerate#484 clears after the step
family: misplaced-clear
shape: for batch in training_dataloader: with accelerator.accumulate(model): optimizer.zero_grad(); outputs = model(inputs); loss = loss_function(outputs, targets); accelerator.backward(loss); optimizer.step(); scheduler.step()
numeric: on each sync micro-batch the zero_grad wipes the earlier micro-batches of the window: each update is one micro-batch's gradient / K
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
model = torch.nn.Sequential(torch.nn.Linear(5, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
training_dataloader = [(torch.randn(6, 5), torch.randint(0, 3, (6,))) for _ in range(8)]
model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
for batch in training_dataloader:
    with accelerator.accumulate(model):
        optimizer.zero_grad()  # BUG
        inputs, targets = batch
        outputs = model(inputs)
        loss = F.cross_entropy(outputs, targets)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        # FIX: optimizer.zero_grad()
_gb.done(model)
