"""Accelerate's gradient-accumulation example: the step and no_sync branches are swapped, so the optimizer steps on the wrong micro-batches.

source: huggingface/accelerate#435 (https://github.com/huggingface/accelerate/issues/435), "bug in gradient accumulation example" (examples/by_feature/gradient_accumulation.py): "In the current code `optimizer.step()` is getting called in step `1,2,3,4,6,7,8,9,11,...` instead it should be getting called in step `0,5,10,15,20,...`"; muellerzr: "Should be fixed now thanks to #459"
family: underscaled-window
shape: for step, batch in enumerate(train_dataloader): if step % gradient_accumulation_steps == 0: with accelerator.no_sync(model): output = model(**batch); loss = output.loss / gradient_accumulation_steps; accelerator.backward(loss); else: output = model(**batch); loss = output.loss / gradient_accumulation_steps; accelerator.backward(loss); optimizer.step(); lr_scheduler.step(); optimizer.zero_grad(). Fixed twin: accumulate while (step + 1) % gradient_accumulation_steps != 0 and step on the others (counting from 1, as the maintainer wrote: "Traditionally it's step+1"). One CPU process, gradient_accumulation_steps = 4
numeric: most steps use one micro-batch divided by 4 (a quarter of its mean), the others two: the windows are neither the intended micro-batches nor scaled for their size
watch: GG111
lint: GG111
bug-step: 1
"""
import torch
import torch.nn.functional as F
from accelerate import Accelerator

import _gb


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 2))

    def forward(self, input_ids, labels):
        logits = self.net(input_ids)
        return type("Output", (), {"loss": F.cross_entropy(logits, labels), "logits": logits})()


_gb.setup()
accelerator = Accelerator(cpu=True)
model = Model()
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
lr_scheduler = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0)
model, optimizer, lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)
gradient_accumulation_steps = 4
train_dataloader = [{"input_ids": x, "labels": (x[:, 0] > 0).long()} for x in (torch.randn(8, 6) for _ in range(12))]
for step, batch in enumerate(train_dataloader):
    if step % gradient_accumulation_steps == 0:  # BUG
    # FIX: if (step + 1) % gradient_accumulation_steps != 0:
        with accelerator.no_sync(model):
            output = model(**batch)
            loss = output.loss / gradient_accumulation_steps
            accelerator.backward(loss)
    else:
        output = model(**batch)
        loss = output.loss / gradient_accumulation_steps
        accelerator.backward(loss)
        optimizer.step()
        lr_scheduler.step()
        optimizer.zero_grad()
_gb.done(accelerator.unwrap_model(model))
