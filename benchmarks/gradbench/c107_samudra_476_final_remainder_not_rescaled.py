"""Samudra gradient accumulation: the epoch's leftover micro-batches are stepped at the end of the epoch, but each was divided by the full accumulation count, so that update is too small.

source: m2lines/Samudra#476 (https://github.com/m2lines/Samudra/pull/476), "Gradient accumulation" (merged), review thread on src/ocean_emulators/train.py by chatgpt-codex-connector[bot]: "Scale final accumulation step by remaining batches. Each micro-batch loss is divided by gradient_accumulation_steps before backward, but when the epoch ends with fewer batches than that, the remainder path steps the optimizer using those already downscaled gradients without adjusting for the actual number". The code quoted: if (data_iter_step + 1) % self.gradient_accumulation_steps != 0: num_accumulated = (data_iter_step + 1) % self.gradient_accumulation_steps; logger.info(...); torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0); self.optimizer.step(); self._ema(model=self.model). Unconfirmed: an automated review finding; no maintainer reply is on record. The twin multiplies the leftover window by gradient_accumulation_steps / num_accumulated before the clip
family: underscaled-window
shape: for data_iter_step, batch in enumerate(loader): loss = self.loss_fn(self.model(x), y) / self.gradient_accumulation_steps; loss.backward(); if (data_iter_step + 1) % self.gradient_accumulation_steps == 0: clip_grad_norm_(..., 1.0); self.optimizer.step(); self._ema(model=self.model); self.optimizer.zero_grad(). After the loop the leftover window is stepped as quoted. 6 batches per epoch, gradient_accumulation_steps = 4, SGD
numeric: every epoch's second update is half the mean gradient of its 2 micro-batches
watch: GG111
lint: GG111
bug-step: 2
"""
import copy

import torch
import torch.nn.functional as F

import _gb


class Trainer:
    def __init__(self, model, gradient_accumulation_steps=4):
        self.model = model
        self.ema_model = copy.deepcopy(model)
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    @torch.no_grad()
    def _ema(self, model, decay=0.99):
        for e, p in zip(self.ema_model.parameters(), model.parameters()):
            e.mul_(decay).add_(p, alpha=1 - decay)

    def train_epoch(self, loader):
        self.model.train()
        self.optimizer.zero_grad()
        for data_iter_step, (x, y) in enumerate(loader):
            loss = F.mse_loss(self.model(x), y) / self.gradient_accumulation_steps
            loss.backward()
            if (data_iter_step + 1) % self.gradient_accumulation_steps == 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.optimizer.step()
                self._ema(model=self.model)
                self.optimizer.zero_grad()
        # Handle any remaining accumulated gradients at the end of the epoch
        if (data_iter_step + 1) % self.gradient_accumulation_steps != 0:
            num_accumulated = (data_iter_step + 1) % self.gradient_accumulation_steps
            # FIX: for p in self.model.parameters():
            # FIX:     p.grad.mul_(self.gradient_accumulation_steps / num_accumulated)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self._ema(model=self.model)
            self.optimizer.zero_grad()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 6))
_gb.start(model)
loader = [(x, 0.5 * torch.roll(x, 1, dims=1)) for x in (0.3 * torch.randn(4, 6) for _ in range(6))]
trainer = Trainer(model)
for epoch in range(3):
    trainer.train_epoch(loader)
_gb.done(model)
