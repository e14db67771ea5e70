"""GG111: correct code of the same shapes (no finding expected)."""
from contextlib import nullcontext

import torch


def divided_by_the_windows_own_size(model, loader, loss_fn, optimizer, accum):
    n = len(loader)
    for i, (x, y) in enumerate(loader):
        window = min(accum, n - i // accum * accum)  # K, or K' for the last window
        loss = loss_fn(model(x), y) / window
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == n:
            optimizer.step()
            optimizer.zero_grad()


def length_checked_to_divide(ddp_model, loader, loss_fn, optimizer, accum_steps):
    assert len(loader) % accum_steps == 0, "use a loader of whole windows"
    for i, (x, y) in enumerate(loader):
        last = (i + 1) % accum_steps == 0 or i + 1 == len(loader)
        with nullcontext() if last else ddp_model.no_sync():
            (loss_fn(ddp_model(x), y) / accum_steps).backward()
        if last:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def length_checked_with_raise(fabric, model, optimizer, dataloader, accumulate_grad_batches):
    if len(dataloader) % accumulate_grad_batches:
        raise ValueError("the loader's length must be a multiple of accumulate_grad_batches")
    for iteration, batch in enumerate(dataloader):
        is_accumulating = (iteration + 1) % accumulate_grad_batches != 0 and iteration + 1 < len(dataloader)
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
            fabric.backward(loss / accumulate_grad_batches)
        if not is_accumulating:
            optimizer.step()
            optimizer.zero_grad()


def timm_sets_the_last_windows_size(model, loader, loss_fn, optimizer, accum_steps):
    last_accum_steps = len(loader) % accum_steps
    last_batch_idx_to_accum = len(loader) - last_accum_steps
    for batch_idx, (x, y) in enumerate(loader):
        need_update = batch_idx == len(loader) - 1 or (batch_idx + 1) % accum_steps == 0
        if batch_idx >= last_batch_idx_to_accum:
            accum_steps = last_accum_steps
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        if need_update:
            optimizer.step()
            optimizer.zero_grad()


def remainder_rescaled(model, loader, loss_fn, optimizer, accum):
    i = -1
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    if (i + 1) % accum != 0:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(accum / ((i + 1) % accum))
        optimizer.step()
        optimizer.zero_grad()


def summed_loss_over_the_window(model, loader, loss_fn, optimizer, accum):
    # a sum-reduced loss divided by the window's item count: no division by K at all
    items = 0
    for i, (x, y) in enumerate(loader):
        loss_fn(model(x), y).backward()
        items += len(y)
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.div_(items)
            optimizer.step()
            optimizer.zero_grad()
            items = 0


def flag_fixed_for_the_loop(model, loader, loss_fn, optimizer, accum, no_accumulation):
    assert len(loader) % accum == 0
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0 or no_accumulation:
            optimizer.step()
            optimizer.zero_grad()


def literal_batches_in_whole_windows(model, loss_fn, optimizer, make_batch):
    accumulation_steps = 4
    batches = [make_batch() for _ in range(8)]  # two whole windows: the `or` never closes a short one
    for batch_idx, (x, y) in enumerate(batches):
        (loss_fn(model(x), y) / accumulation_steps).backward()
        if (batch_idx + 1) % accumulation_steps == 0 or batch_idx + 1 == len(batches):
            optimizer.step()
            optimizer.zero_grad()
