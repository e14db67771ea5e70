# mutation: skip loss-tensor-in-sum (train_step returns a detached loss already)
"""A large trainer's update (fairseq/OLMo style): one method with a delayed-update loop and many
independent options around the step. Each option branch mentions the optimizer but changes no
gradient buffer, so the iteration has 2**10 branch combinations and a handful of distinct event
orders: the linter must check it, not give up on it as too complex."""
import math

import torch
from torch import nn


class Trainer:
    def __init__(self, model, cfg):
        self.model = model
        self.cfg = cfg
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        self.loss_fn = nn.CrossEntropyLoss()
        self.num_updates = 0
        self.logs = []

    def log(self, **values):
        self.logs.append(values)

    def train_step(self, samples):
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for i, (x, y) in enumerate(samples):  # delayed update: one backward per sample, one step
            if self.cfg.log_lr_every_sample:
                self.log(lr=self.optimizer.param_groups[0]["lr"])
            loss = self.loss_fn(self.model(x), y) / len(samples)
            if self.cfg.log_optimizer_state:
                self.log(state=len(self.optimizer.state))
            loss.backward()
            total += loss.item()
        if self.cfg.warmup and self.num_updates < self.cfg.warmup:
            for group in self.optimizer.param_groups:
                group["lr"] = self.cfg.lr * (self.num_updates + 1) / self.cfg.warmup
        if self.cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        if self.cfg.log_param_groups:
            self.log(groups=len(self.optimizer.param_groups))
        if self.cfg.check_finite and not math.isfinite(total):
            self.log(skipped=True)
            self.optimizer.zero_grad(set_to_none=True)
            return None
        if self.cfg.log_weight_decay:
            self.log(wd=self.optimizer.param_groups[0]["weight_decay"])
        if self.cfg.log_betas:
            self.log(betas=self.optimizer.param_groups[0]["betas"])
        self.optimizer.step()
        if self.cfg.log_eps:
            self.log(eps=self.optimizer.param_groups[0]["eps"])
        if self.cfg.log_amsgrad:
            self.log(amsgrad=self.optimizer.param_groups[0]["amsgrad"])
        if self.cfg.log_updates:
            self.log(updates=self.num_updates)
        self.num_updates += 1
        return total

    def train(self, batches, update_freq):
        for start in range(0, len(batches), update_freq):
            self.train_step(batches[start : start + update_freq])
