"""A torch.compile'd model and a compiled training-step function called from the loop."""
# mutation: skip loss-tensor-in-sum (train_step returns the loss detached: summing it keeps no graph)
import torch
from torch import nn


@torch.compile(fullgraph=False)
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def fit(model, loader, epochs=3, lr=1e-3):
    model = torch.compile(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        total = 0.0
        for x, y in loader:
            total += train_step(model, optimizer, loss_fn, x, y).item()
        print(epoch, total / len(loader))


def fit_inline(model, loader, epochs=3, lr=1e-3):
    compiled = torch.compile(model, mode="reduce-overhead")
    optimizer = torch.optim.SGD(compiled.parameters(), lr=lr, momentum=0.9)

    @torch.compile
    def opt_step():
        optimizer.step()

    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(compiled(x), y)
            loss.backward()
            opt_step()
