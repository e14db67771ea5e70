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


# --- correct: no finding -------------------------------------------------------
def with_item(model, loader, loss_fn, optimizer):
    total_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
        total_loss += loss.detach() * 0
        total_loss += float(loss)
    return total_loss


def under_no_grad(model, loader, loss_fn, optimizer):
    total = torch.zeros(())
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            total += loss


def summed_then_backward(model, loader, loss_fn, optimizer, heads):
    for x, y in loader:
        optimizer.zero_grad()
        total = 0
        for head in heads:
            loss = loss_fn(head(model(x)), y)
            total += loss
        total.backward()
        optimizer.step()


def building_the_loss(model, loader, loss_fn, optimizer, reg):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss += reg(model)
        loss.backward()
        optimizer.step()
