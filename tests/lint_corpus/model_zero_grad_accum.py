"""Accumulation that clears through the model (model.zero_grad()) with a counter and a final flush."""
import torch


def train(model, loader, loss_fn, lr=1e-3, accumulation_steps=8, epochs=1):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    model.zero_grad()
    step = 0
    for epoch in range(epochs):
        for inputs, labels in loader:
            predictions = model(inputs)
            loss = loss_fn(predictions, labels)
            loss = loss / accumulation_steps
            loss.backward()
            step += 1
            if step % accumulation_steps == 0:
                optimizer.step()
                model.zero_grad()
    if step % accumulation_steps != 0:
        # the last window has step % accumulation_steps micro-batches, each divided by accumulation_steps
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(accumulation_steps / (step % accumulation_steps))
        optimizer.step()
        model.zero_grad()
