"""Accelerate and Fabric loops are the user's loops: the framework's backward is a backward pass."""
import lightning as L
import torch
from accelerate import Accelerator


def accelerate_forgot_zero_grad(model, optimizer, dataloader, scheduler):
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, dataloader, scheduler = accelerator.prepare(model, optimizer, dataloader, scheduler)
    for batch in dataloader:
        with accelerator.accumulate(model):
            outputs = model(**batch)
            accelerator.backward(outputs.loss)
            optimizer.step()  # expect: GG101
            scheduler.step()


def accelerate_no_accumulate_clears_every_batch(model, optimizer, dataloader, accelerator, accum):
    for step, batch in enumerate(dataloader):
        loss = model(**batch).loss / accum
        accelerator.backward(loss)
        if (step + 1) % accum == 0:
            optimizer.step()
        optimizer.zero_grad()  # expect: GG102
    optimizer.step()  # expect: GG111


def fabric_undivided(model, optimizer, dataloader, fabric, accum):
    for i, batch in enumerate(dataloader):
        is_accumulating = (i + 1) % accum != 0
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            loss = model(batch).mean()
            fabric.backward(loss)  # expect: GG104
        if not is_accumulating:
            optimizer.step()
            optimizer.zero_grad()
    optimizer.step()


def fabric_forgot_zero_grad(model, optimizer, dataloader, fabric):
    for batch in dataloader:
        loss = model(batch).mean()
        fabric.backward(loss)
        fabric.clip_gradients(model, optimizer, max_norm=1.0)
        optimizer.step()  # expect: GG101


# --- correct: no finding -------------------------------------------------------
def accelerate_accumulate(model, optimizer, dataloader, scheduler):
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, dataloader, scheduler = accelerator.prepare(model, optimizer, dataloader, scheduler)
    model.train()
    for epoch in range(3):
        for batch in dataloader:
            with accelerator.accumulate(model):
                outputs = model(**batch)
                loss = outputs.loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()


def fabric_accumulate(model, optimizer, dataloader, fabric, accum):
    for i, batch in enumerate(dataloader):
        is_accumulating = (i + 1) % accum != 0
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            loss = model(batch).mean() / accum
            fabric.backward(loss)
        if not is_accumulating:
            optimizer.step()
            optimizer.zero_grad()
    optimizer.step()  # expect: GG111


def fabric_plain():
    fabric = L.Fabric(accelerator="cpu")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    for x in torch.randn(10, 8, 4):
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        fabric.backward(loss)
        optimizer.step()
