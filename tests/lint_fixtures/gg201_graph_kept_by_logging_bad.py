"""GG201: a loss tensor accumulated for logging without .item() or .detach()."""
import torch


def running_total(model, loader, loss_fn, optimizer):
    total_loss = 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss  # expect: GG201
    return total_loss


def weighted_total(model, loader, loss_fn, optimizer):
    running = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        running = running + loss * x.size(0)  # expect: GG201
    return running


def epoch_loss_times_batch(model, loader, loss_fn, optimizer):
    epoch_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        epoch_loss += loss * x.size(0)  # expect: GG201
    return epoch_loss


def scaled_loss_logged_raw(model, loader, loss_fn, optimizer, accum):
    logged = 0.0
    for i, (x, y) in enumerate(loader):
        raw = loss_fn(model(x), y)
        scaled = raw / accum
        scaled.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        shown = raw.float()
        logged += shown  # expect: GG201
    optimizer.step()
