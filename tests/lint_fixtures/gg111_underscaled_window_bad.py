"""GG111: the last, partial window is stepped with its losses divided by the full window size."""
from contextlib import nullcontext

import torch


def last_batch_closes_the_window(model, loader, loss_fn, optimizer, accum):
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()  # expect: GG111
            optimizer.zero_grad()


def named_window_test(ddp_model, loader, loss_fn, optimizer, accum_steps):
    for i, (x, y) in enumerate(loader):
        last = (i + 1) % accum_steps == 0 or i + 1 == len(loader)
        with nullcontext() if last else ddp_model.no_sync():
            (loss_fn(ddp_model(x), y) / accum_steps).backward()
        if last:
            optimizer.step()  # expect: GG111
            optimizer.zero_grad(set_to_none=True)


def fabric_is_accumulating(fabric, model, optimizer, dataloader, accumulate_grad_batches):
    for iteration, batch in enumerate(dataloader):
        is_accumulating = (iteration + 1) % accumulate_grad_batches != 0 and iteration + 1 < len(dataloader)
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
            fabric.backward(loss / accumulate_grad_batches)
        if not is_accumulating:
            optimizer.step()  # expect: GG111
            optimizer.zero_grad()


def amp_scaler(model, loader, loss_fn, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
            loss = loss / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0 or i == len(loader) - 1:
            scaler.step(optimizer)  # expect: GG111
            scaler.update()
            optimizer.zero_grad()


def remainder_stepped_alone(model, loader, loss_fn, optimizer, accum):
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    if (i + 1) % accum != 0:
        optimizer.step()  # expect: GG111
        optimizer.zero_grad()


def remainder_after_the_epochs(model, loader, loss_fn, optimizer, accum, epochs):
    step = 0
    for epoch in range(epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss /= accum
            loss.backward()
            step += 1
            if step % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    if step % accum:
        optimizer.step()  # expect: GG111


def literal_batches_with_a_short_last_window(model, loss_fn, optimizer, make_batch):
    accumulation_steps = 4
    batches = [make_batch() for _ in range(10)]  # the last window holds 2 micro-batches, each divided by 4
    for batch_idx, (x, y) in enumerate(batches):
        (loss_fn(model(x), y) / accumulation_steps).backward()
        if (batch_idx + 1) % accumulation_steps == 0 or batch_idx + 1 == len(batches):
            optimizer.step()  # expect: GG111
            optimizer.zero_grad()
