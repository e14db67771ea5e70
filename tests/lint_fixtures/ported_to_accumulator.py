"""GG102: a hand loop ported to gradguard.Accumulator that kept its zero_grad() (each clearing
throws away the window's earlier micro-batches; the Accumulator clears after each step itself)."""
import torch
import torch.nn.functional as F

import gradguard as gg


def top_of_the_loop(model, loader):
    optimizer = torch.optim.AdamW(model.parameters())
    acc = gg.Accumulator(optimizer, steps=4)
    for x, y in loader:
        optimizer.zero_grad()  # expect: GG102
        loss = F.cross_entropy(model(x), y)
        acc.backward(loss, count=len(y))
        acc.step()
    acc.flush()


def after_the_step(model, loader):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acc = gg.Accumulator(opt, 8)
    for x, y in loader:
        acc.backward(F.mse_loss(model(x), y), count=len(x))
        acc.step()
        opt.zero_grad(set_to_none=True)  # expect: GG102


def module_zero_grad_any_names(net, batches):
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    window = gg.Accumulator(sgd, steps=2)
    for batch in batches:
        net.zero_grad()  # expect: GG102
        window.backward(net(batch).mean())
        window.step()


class Trainer:
    def __init__(self, model, steps):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters())
        self.exact = gg.Accumulator(self.optimizer, steps=steps)

    def fit(self, loader):
        for x, y in loader:
            self.optimizer.zero_grad()  # expect: GG102
            self.exact.backward(F.cross_entropy(self.model(x), y), count=len(y))
            self.exact.step()
