"""GG103: correct code of the same shapes (no finding expected)."""
import contextlib
import torch


def remainder_stepped_after(model, loader, loss_fn, accum, optimizer):
    for step, (x, y) in enumerate(loader, start=1):
        (loss_fn(model(x), y) / accum).backward()
        if step % accum == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    if step % accum != 0:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def remainder_in_condition(model, loader, loss_fn, accum, optimizer):
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0 or (i + 1) == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def remainder_in_second_step(model, loader, loss_fn, accum, optimizer):
    last = len(loader) - 1
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        elif i == last:
            optimizer.step()
            optimizer.zero_grad()


def whole_windows(model, data, loss_fn, accum, optimizer, steps):
    for i in range(steps * accum):
        (loss_fn(model(data[i])) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def stops_on_a_window_boundary(model, loader, loss_fn, accum, optimizer, max_steps):
    steps = 0
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
            if steps == max_steps:
                break


def literal_data_fits_the_window(model, loss_fn, optimizer):
    accum = 4
    sizes = [40, 12, 33, 7, 25, 25, 9, 30]
    for i, n in enumerate(sizes):
        (loss_fn(model(n)) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def window_test_through_a_name_with_the_last_batch(model, loader, loss_fn, optimizer, accumulation_steps):
    for i, (inputs, labels) in enumerate(loader):
        last_of_window = (i + 1) % accumulation_steps == 0 or i + 1 == len(loader)
        ctx = contextlib.nullcontext() if last_of_window else model.no_sync()
        with ctx:
            (loss_fn(model(inputs), labels) / accumulation_steps).backward()
        if last_of_window:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
