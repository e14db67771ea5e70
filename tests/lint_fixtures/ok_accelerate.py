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


def train_plain_backward(model, optimizer, dataloader, loss_fn, accelerator):
    for step, batch in enumerate(dataloader):
        loss = loss_fn(model(batch))
        accelerator.backward(loss)
        if step % 4 == 0:
            optimizer.step()
        optimizer.zero_grad()
