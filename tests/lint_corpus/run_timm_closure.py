"""timm's train_one_epoch: the backward and step sit in a local `_backward` closure, called once per
micro-batch; `need_update` marks the end of an accumulation window."""
import torch
from torch import nn


def train_one_epoch(epoch, model, loader, optimizer, loss_fn, accum_steps=2, clip_grad=1.0):
    model.train()
    last_accum_steps = len(loader) % accum_steps
    updates_per_epoch = (len(loader) + accum_steps - 1) // accum_steps
    num_updates = epoch * updates_per_epoch
    last_batch_idx = len(loader) - 1
    last_batch_idx_to_accum = len(loader) - last_accum_steps
    losses_sum = 0.0
    optimizer.zero_grad()
    for batch_idx, (input, target) in enumerate(loader):
        last_batch = batch_idx == last_batch_idx
        need_update = last_batch or (batch_idx + 1) % accum_steps == 0
        if batch_idx >= last_batch_idx_to_accum:
            accum_steps = last_accum_steps

        def _forward():
            output = model(input)
            loss = loss_fn(output, target)
            if accum_steps > 1:
                loss /= accum_steps
            return loss

        def _backward(_loss):
            _loss.backward()
            if need_update:
                if clip_grad is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
                optimizer.step()

        loss = _forward()
        _backward(loss)
        losses_sum += loss.item()
        if not need_update:
            continue
        num_updates += 1
        optimizer.zero_grad()
    return losses_sum


def main():
    torch.manual_seed(0)
    x = torch.randn(28, 4, dtype=torch.float64)
    y = torch.randint(0, 2, (28,))
    loader = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 28, 4)]
    model = nn.Linear(4, 2).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    for epoch in range(2):
        train_one_epoch(epoch, model, loader, optimizer, nn.CrossEntropyLoss())
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
