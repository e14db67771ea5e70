"""Correct: an HF Accelerate loop with accumulate() (no finding expected)."""
from accelerate import Accelerator


def train(model, optimizer, dataloader, scheduler, loss_fn):
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, dataloader, scheduler = accelerator.prepare(model, optimizer, dataloader, scheduler)
    for batch in dataloader:
        with accelerator.accumulate(model):
            inputs, targets = batch
            outputs = model(inputs)
            loss = loss_fn(outputs, targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()



def train_plain_backward_with_window(model, optimizer, dataloader, loss_fn, accelerator, accum):
    # no accumulate(): Accelerate neither divides nor gates; the loop does both itself
    assert len(dataloader) % accum == 0  # whole windows: every loss is divided by accum
    for step, batch in enumerate(dataloader):
        loss = loss_fn(model(batch)) / accum
        accelerator.backward(loss)
        if (step + 1) % accum == 0 or step + 1 == len(dataloader):
            optimizer.step()
            optimizer.zero_grad()
