# mutation: skip drop-last-window (9 batches in windows of 3: the last-batch term never adds a step, the mutant trains the same)
# mutation: skip clear-before-backward (the gradients live in the buffers, so clearing .grad earlier changes nothing)
# mutation: skip clear-after-backward (the window's clearing already follows each backward here, after the copy into the buffers: moved before the copy, .grad is None and the program stops, no silent bug)
"""Accumulation in the user's own buffers (Opacus's virtual step): each micro-batch's .grad is
added into a buffer and cleared; at the window's end the averaged buffer is put back and stepped."""
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    x = torch.randn(36, 3, dtype=torch.float64)
    y = torch.randn(36, 1, dtype=torch.float64)
    model = nn.Linear(3, 1).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    params = [p for p in model.parameters() if p.requires_grad]
    summed_grads = [torch.zeros_like(p) for p in params]
    n_accumulation_steps = 3
    for epoch in range(2):
        for step, i in enumerate(range(0, 36, 4)):
            loss = nn.functional.mse_loss(model(x[i : i + 4]), y[i : i + 4])
            loss.backward()
            for buf, p in zip(summed_grads, params):
                buf.add_(p.grad)
            optimizer.zero_grad()
            if (step + 1) % n_accumulation_steps == 0 or i + 4 >= 36:
                for buf, p in zip(summed_grads, params):
                    p.grad = buf / n_accumulation_steps
                optimizer.step()
                for buf in summed_grads:
                    buf.zero_()
                optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
