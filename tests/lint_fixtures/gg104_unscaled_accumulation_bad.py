"""GG104: an accumulation loop whose mean loss reaches backward undivided."""
import torch
import torch.nn.functional as F


def not_divided(model, loader, accum, optimizer):
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # expect: GG104
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    optimizer.step()


def not_divided_with_scaler(model, loader, criterion, accum, optimizer, scaler):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            outputs = model(x)
            loss = criterion(outputs, y)
        scaler.scale(loss).backward()  # expect: GG104
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    scaler.step(optimizer)


def nanogpt_without_division(model, get_batch, gradient_accumulation_steps, optimizer, max_iters):
    for it in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            X, Y = get_batch("train")
            logits, loss = model(X, Y)
            loss.backward()  # expect: GG104
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def flag_toggled_window_not_divided(model, loader, loss_fn, optimizer, use_accum, accum_steps):
    for i, (x, y) in enumerate(loader):
        if use_accum:
            loss = loss_fn(model(x), y)
            loss.backward()  # expect: GG104
            if (i + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
    optimizer.step()
