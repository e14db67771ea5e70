"""A small Trainer class with callbacks: fit -> _run_epoch -> _training_step, hooks around
each batch, accumulation by a config field."""
import torch
from torch import nn


class Callback:
    def on_epoch_start(self, trainer):
        pass

    def on_batch_end(self, trainer, loss):
        pass

    def on_epoch_end(self, trainer):
        pass


class PrintLoss(Callback):
    def __init__(self, every=50):
        self.every = every

    def on_batch_end(self, trainer, loss):
        if trainer.global_step % self.every == 0:
            print(trainer.global_step, loss)


class Trainer:
    def __init__(self, model, optimizer, loss_fn, grad_accum_steps=1, callbacks=()):
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.grad_accum_steps = grad_accum_steps
        self.callbacks = list(callbacks)
        self.global_step = 0

    def _call(self, hook, *args):
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    def _training_step(self, batch):
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        (loss / self.grad_accum_steps).backward()
        return loss

    def _run_epoch(self, loader):
        self.model.train()
        self._call("on_epoch_start")
        epoch_loss = 0.0
        assert len(loader) % self.grad_accum_steps == 0  # whole windows: each loss is divided by their size
        for i, batch in enumerate(loader):
            loss = self._training_step(batch)
            if (i + 1) % self.grad_accum_steps == 0 or i + 1 == len(loader):
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.optimizer.step()
                self.optimizer.zero_grad()
                self.global_step += 1
            epoch_loss += loss.item()
            self._call("on_batch_end", loss.item())
        self._call("on_epoch_end")
        return epoch_loss / max(len(loader), 1)

    def fit(self, loader, epochs):
        self.optimizer.zero_grad()
        for epoch in range(epochs):
            self._run_epoch(loader)


def main():
    torch.manual_seed(0)
    model = nn.Linear(4, 2).double()
    x = torch.randn(24, 4, dtype=torch.float64)
    y = torch.randint(0, 2, (24,))
    loader = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 24, 4)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    Trainer(model, opt, nn.CrossEntropyLoss(), grad_accum_steps=2, callbacks=[PrintLoss(2)]).fit(loader, 2)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
