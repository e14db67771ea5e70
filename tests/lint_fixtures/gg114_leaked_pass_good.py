"""GG114 fixed: the stray gradient cleared before the loop, or a loop that clears before it back-propagates."""
import torch


def check_then_train(model, x, y, optimizer, steps):
    logits, loss = model(x, y)
    loss.backward()
    reference_norm = sum(float(p.grad.norm()) for p in model.parameters())
    optimizer.zero_grad(set_to_none=True)
    for step in range(steps):
        logits, loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return reference_norm


def evaluate(model, loader, loss_fn):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += float(loss_fn(model(x), y))
    return total


def evaluate_then_train(model, loader, loss_fn, optimizer, epochs):
    print(evaluate(model, loader, loss_fn))
    for epoch in range(epochs):
        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def clears_first(model, batch, optimizer, loader):
    model(batch).sum().backward()
    for x in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()


def steps_the_first_pass(model, batch, optimizer, loader):
    model(batch).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
