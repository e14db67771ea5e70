"""GG104: correct code of the same shapes (no finding expected)."""
import torch
import torch.nn.functional as F


def divided(model, loader, accum, optimizer):
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        loss = loss / accum
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def divided_inline(model, loader, accum, optimizer):
    for i, (x, y) in enumerate(loader):
        raw_loss = F.cross_entropy(model(x), y)
        (raw_loss / accum).backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def summed_loss(model, loader, accum, optimizer, n_total):
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y, reduction="sum")
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            for p in model.parameters():
                p.grad /= n_total
            optimizer.step()
            optimizer.zero_grad()


def loss_from_helper(model, loader, accum, optimizer):
    for i, batch in enumerate(loader):
        loss = compute_loss(model, batch)
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def compute_loss(model, batch):
    return model(batch).mean() / 4


def multitask_sum(model, batch, losses_fns, optimizer, loader):
    for x, y in loader:
        optimizer.zero_grad()
        for fn in losses_fns:
            fn(model(x), y).backward()
        optimizer.step()


