"""GG113: every micro-batch of a window divided by K twice."""
from accelerate import Accelerator

accum_steps = 4
accelerator = Accelerator(gradient_accumulation_steps=accum_steps)


def train_accelerate(model, optimizer, loader, loss_fn):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.accumulate(model):
            loss = loss_fn(model(batch["x"]), batch["y"])
            loss = loss / accum_steps
            accelerator.backward(loss)  # expect: GG113
            optimizer.step()
            optimizer.zero_grad()


class Trainer:
    def __init__(self, args):
        self.args = args
        self.accel = Accelerator(gradient_accumulation_steps=args.ga)

    def fit(self, model, optimizer, loader):
        for x, y in loader:
            with self.accel.accumulate(model):
                self.accel.backward(model(x, y) / self.accel.gradient_accumulation_steps)  # expect: GG113
                optimizer.step()
                optimizer.zero_grad()


def compute_loss(model, x, y, k):
    return model(x, y).mean() / k


def train_twice_divided(model, optimizer, loader, grad_accum):
    assert len(loader) % grad_accum == 0
    for i, (x, y) in enumerate(loader):
        loss = compute_loss(model, x, y, grad_accum)
        (loss / grad_accum).backward()  # expect: GG113
        if (i + 1) % grad_accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def train_grads_divided(model, optimizer, loader, k):
    assert len(loader) % k == 0
    for i, (x, y) in enumerate(loader):
        loss = model(x, y) / k
        loss.backward()
        if (i + 1) % k == 0:
            for p in model.parameters():
                p.grad /= k  # expect: GG113
            optimizer.step()
            optimizer.zero_grad()
