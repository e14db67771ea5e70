"""GG113 fixed: each micro-batch loss divided by K once (Accelerate's backward does it itself)."""
from accelerate import Accelerator

accum_steps = 4
accelerator = Accelerator(gradient_accumulation_steps=accum_steps)


def train_accelerate(model, optimizer, loader, loss_fn):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.accumulate(model):
            loss = loss_fn(model(batch["x"]), batch["y"])
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()


class Trainer:
    def __init__(self, args):
        self.args = args
        self.accel = Accelerator()  # no accumulation set up: the user's division is the only one

    def fit(self, model, optimizer, loader):
        assert len(loader) % self.args.ga == 0
        for i, (x, y) in enumerate(loader):
            self.accel.backward(model(x, y) / self.args.ga)
            if (i + 1) % self.args.ga == 0:
                optimizer.step()
                optimizer.zero_grad()


def compute_loss(model, x, y, k):
    return model(x, y).mean() / k


def train_divided_once(model, optimizer, loader, grad_accum):
    assert len(loader) % grad_accum == 0
    for i, (x, y) in enumerate(loader):
        loss = compute_loss(model, x, y, grad_accum)
        loss.backward()
        if (i + 1) % grad_accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def train_grads_divided(model, optimizer, loader, k):
    assert len(loader) % k == 0
    for i, (x, y) in enumerate(loader):
        loss = model(x, y)
        loss.backward()
        if (i + 1) % k == 0:
            for p in model.parameters():
                p.grad /= k  # the only division: a sum of K mean losses divided once
            optimizer.step()
            optimizer.zero_grad()


def train_divided_by_another_factor(model, optimizer, loader, k, temperature):
    assert len(loader) % k == 0
    for i, (x, y) in enumerate(loader):
        loss = model(x, y) / temperature
        (loss / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()
