"""First-order meta-learning in the style of learn2learn's RL examples: the validation losses of
the adapted clones are summed over the tasks of a meta-batch, divided, and back-propagated once.
The running sum is the meta-loss, not a log."""
import copy

import torch
from torch import nn


def adapt(learner, x, y, lr):
    clone = copy.deepcopy(learner)
    loss = nn.functional.mse_loss(clone(x), y)
    grads = torch.autograd.grad(loss, list(clone.parameters()))
    with torch.no_grad():
        for p, g in zip(clone.parameters(), grads):
            p -= lr * g
    return clone


def main():
    torch.manual_seed(0)
    learner = nn.Linear(3, 1).double()
    opt = torch.optim.Adam(learner.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    meta_bsz = 3
    for iteration in range(4):
        iteration_loss = 0.0
        for task in range(meta_bsz):
            w = torch.randn(3, 1, generator=gen, dtype=torch.float64)
            x = torch.randn(8, 3, generator=gen, dtype=torch.float64)
            clone = adapt(learner, x, x @ w, 0.1)
            # first-order: the clone's output is read through the learner's parameters
            loss = nn.functional.mse_loss(learner(x) + (clone(x) - learner(x)).detach(), x @ w)
            iteration_loss += loss
        adaptation_loss = iteration_loss / meta_bsz
        opt.zero_grad()
        adaptation_loss.backward()
        opt.step()
    return [p.detach().clone() for p in learner.parameters()]


if __name__ == "__main__":
    main()
