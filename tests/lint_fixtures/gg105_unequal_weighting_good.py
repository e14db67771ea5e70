"""GG105: correct code of the same shapes (no finding expected)."""
import torch


def divide_by_window_size(model, get_batch, optimizer, gradient_accumulation_steps, max_iters):
    for it in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            x, y = get_batch("train")
            logits, loss = model(x, y)
            loss = loss / gradient_accumulation_steps
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def running_average_for_logging(model, loader, loss_fn, optimizer):
    total = 0.0
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
        avg = total / (i + 1)
        print(avg)


def no_accumulation(model, loader, loss_fn, optimizer):
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y) / (i + 1)  # a decaying weight, but one backward per step
        loss.backward()
        optimizer.step()


def divided_by_its_windows_size(model, loader, loss_fn, optimizer, accumulate):
    steps = len(loader)
    for step, (x, y) in enumerate(loader):
        # the size of the window `step` is in (the last may be shorter): the same for all its micro-batches
        (loss_fn(model(x), y) / min(accumulate, steps - step // accumulate * accumulate)).backward()
        if (step + 1) % accumulate == 0 or step + 1 == steps:
            optimizer.step()
            optimizer.zero_grad()
