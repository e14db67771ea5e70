"""Ultralytics trainer: a zero_grad at the start of every epoch throws away the previous epoch's last, partial window.

source: ultralytics/ultralytics#11217 (https://github.com/ultralytics/ultralytics/pull/11217), "fix double zero_grad call messing up gradient accumulation": the optimizer.zero_grad() at the start of an epoch discards the gradients of the batches at the end of each epoch when accumulate was not reached
family: dropped-window
shape: for epoch: self.optimizer.zero_grad(); for i, batch in enumerate(loader): ni = i + nb * epoch; loss.backward(); if ni - last_opt_step >= self.accumulate: self.optimizer_step() (step, zero_grad); last_opt_step = ni
numeric: with accumulate = 4 and 6 batches per epoch, the last 2 batches of epoch 0 are cleared by epoch 1's zero_grad before the window that should hold them steps
watch: GG102
lint: GG102
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class Trainer:
    def __init__(self):
        self.model = torch.nn.Sequential(torch.nn.Linear(5, 10), torch.nn.ReLU(), torch.nn.Linear(10, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.accumulate = 4

    def optimizer_step(self):
        self.optimizer.step()
        self.optimizer.zero_grad()

    def train(self, loader, epochs):
        nb = len(loader)
        last_opt_step = -1
        for epoch in range(epochs):
            self.optimizer.zero_grad()  # BUG
            for i, (x, y) in enumerate(loader):
                ni = i + nb * epoch
                loss = F.mse_loss(self.model(x), y) / self.accumulate
                loss.backward()
                if ni - last_opt_step >= self.accumulate:
                    self.optimizer_step()
                    last_opt_step = ni


_gb.setup()
trainer = Trainer()
_gb.start(trainer.model)
trainer.train([(torch.randn(4, 5), torch.randn(4, 1)) for _ in range(6)], epochs=2)
_gb.done(trainer.model)
