"""GG101: a loop that back-propagates and steps but clears nothing on some path."""
import torch
from transformers import Trainer

import gradguard as gg


def forgot_zero_grad(model, loader, loss_fn):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()  # expect: GG101


def while_loop(model, batches, loss_fn, opt):
    it = iter(batches)
    while True:
        x, y = next(it)
        with torch.autocast("cpu"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()  # expect: GG101


def clear_only_sometimes(model, loader, loss_fn, optimizer, log):
    for i, (x, y) in enumerate(loader):
        if log:
            optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()  # expect: GG101


def clear_every_fourth_step_every_time(model, loader, loss_fn, opt):
    # zero_grad on every 4th iteration only, step on every one: 3 of 4 steps reuse gradients
    for i, (x, y) in enumerate(loader):
        if i % 4 == 0:
            opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()  # expect: GG101


def clear_every_fourth_in_train_mode(model, loader, loss_fn, opt, training):
    for i, (x, y) in enumerate(loader):
        if i % 4 == 0:
            opt.zero_grad()
        if training:
            loss_fn(model(x), y).backward()
            opt.step()  # expect: GG101


def _update(optimizer):
    optimizer.step()  # expect: GG101


def step_in_a_helper(model, loader, loss_fn, optimizer):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        _update(optimizer)


def one_step(model, batch, optimizer):
    model(batch).mean().backward()
    optimizer.step()  # expect: GG101


def everything_in_a_helper(model, loader, optimizer):
    for batch in loader:
        one_step(model, batch, optimizer)


def accumulate_without_clearing(model, loader, loss_fn, optimizer, accum):
    for step in range(1000):
        for micro_step in range(accum):
            (loss_fn(model(step), micro_step) / accum).backward()
        optimizer.step()  # expect: GG101


class Trainer:  # a plain class, not a framework base
    def fit(self, loader):
        for x, y in loader:
            self.loss(x, y).backward()
            self.opt.step()  # expect: GG101


def grads_to_none_when_present(model, loader, loss_fn, optimizer, clear):
    for x, y in loader:
        if clear:
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.detach_()
                    p.grad.zero_()
        loss_fn(model(x), y).backward()
        optimizer.step()  # expect: GG101


def accumulator_or_plain_without_clearing(model, data, opt, loss_fn, use_accum):
    # the Accumulator branch is fine; the plain branch never clears
    acc = gg.Accumulator(opt, steps=4) if use_accum else None
    for x, y in data:
        if use_accum:
            acc.backward(loss_fn(model(x), y), count=len(y))
            acc.step()
        else:
            loss_fn(model(x), y).backward()
            opt.step()  # expect: GG101


def new_optimizer_each_batch(model, loader, loss_fn):
    """A new optimizer every batch, over the same module: its .grad still grows."""
    for x, y in loader:
        sgd = torch.optim.SGD(model.parameters(), 0.1)
        loss_fn(model(x), y).backward()
        sgd.step()  # expect: GG101


class RolloutTrainer(Trainer):
    """Derives from the HF Trainer but runs its own loop in train(): checked like raw PyTorch."""

    def train(self):
        for epoch in range(self.args.num_ppo_epochs):
            for mb in self.minibatches():
                with self.accelerator.accumulate(self.model):
                    loss = self.policy_loss(mb)
                    self.accelerator.backward(loss)
                    self.optimizer.step()  # expect: GG101


def _step_then_maybe_clear(optimizer, zero_grad=True):
    optimizer.step()  # expect: GG101
    if zero_grad:
        optimizer.zero_grad()


def clearing_flag_passed_false(model, loader, loss_fn, optimizer):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        _step_then_maybe_clear(optimizer, zero_grad=False)  # the helper never clears here


def amp_chosen_once_clears_in_one_branch(model, loader, loss_fn, optimizer, scaler, accum):
    """AMP is decided once for the run: the plain run never reaches the AMP branch's clearing."""
    use_amp = scaler is not None
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (i + 1) % accum == 0:
            if use_amp:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            else:
                optimizer.step()  # expect: GG101
    assert len(loader) % accum == 0
