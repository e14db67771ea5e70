"""GG114: a backward pass before a loop that clears only after its steps."""
import torch


def check_then_train(model, x, y, optimizer, steps):
    logits, loss = model(x, y)
    loss.backward()  # expect: GG114
    reference_norm = sum(float(p.grad.norm()) for p in model.parameters())
    for step in range(steps):
        logits, loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return reference_norm


def evaluate(model, loader, loss_fn):
    total = 0.0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()  # evaluation code that back-propagates
        total += float(loss)
    return total


def evaluate_then_train(model, loader, loss_fn, optimizer, epochs):
    print(evaluate(model, loader, loss_fn))  # expect: GG114
    for epoch in range(epochs):
        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def warm_start(model, batch, optimizer, loader, use_amp):
    if use_amp:
        model.half()
    with torch.autocast("cpu", enabled=use_amp):
        model(batch).sum().backward()  # expect: GG114
    if True:
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
