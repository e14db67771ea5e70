"""Correct: loops toggled by a flag fixed for the whole run, and loops driven by a gradguard
Accumulator (it scales, steps and clears itself). No finding expected."""
import torch

import gradguard as gg
from gradguard import Accumulator, accumulate_batch


def accumulator_or_plain(model, data, opt, sched, loss_fn, accumulate):
    # the Accumulator branch and the plain full iteration are two different loops
    acc = gg.Accumulator(opt, steps=3, scheduler=sched) if accumulate else None
    for x, y in data:
        if accumulate:
            for a, b in ((0, 1), (1, 6), (6, 10)):
                acc.backward(loss_fn(model(x[a:b]), y[a:b]), count=b - a)
                acc.step()
        else:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            sched.step()


def use_accum_flag(model, loader, optimizer, loss_fn, use_accum, accum_steps):
    for i, (x, y) in enumerate(loader):
        if use_accum:
            loss = loss_fn(model(x), y) / accum_steps
            loss.backward()
            if (i + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        else:
            optimizer.zero_grad()  # the top of a full iteration, not a window's end
            loss_fn(model(x), y).backward()
            optimizer.step()
    if use_accum:
        optimizer.step()


def args_accum_greater_than_one(model, loader, optimizer, loss_fn, args):
    for step, batch in enumerate(loader):
        if args.accum > 1:
            (loss_fn(model(batch)) / args.accum).backward()
            if (step + 1) % args.accum == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(batch)).backward()
            optimizer.step()
    optimizer.step()


def accumulator_only(model, loader, optimizer, loss_fn):
    acc = Accumulator(optimizer, steps=4, max_grad_norm=1.0)
    for x, y in loader:
        acc.backward(loss_fn(model(x), y), count=len(y))
        acc.step()
    acc.flush()


class Trainer:
    def __init__(self, model, optimizer, steps):
        self.model = model
        self.accumulator = gg.Accumulator(optimizer, steps=steps, model=model)

    def fit(self, loader, loss_fn):
        for x, y in loader:
            with self.accumulator.microbatch():
                self.accumulator.backward(loss_fn(self.model(x), y), count=y.numel())
            self.accumulator.step()
        self.accumulator.flush()


def auto_microbatches(model, loader, optimizer, loss_fn):
    acc = gg.Accumulator(optimizer, steps=2)
    for batch in loader:
        gg.accumulate_batch(model, loss_fn, batch, 8, acc=acc)
        acc.step()
    acc.flush()


def accumulator_passed_in(model, loader, loss_fn, acc):
    running = 0.0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        acc.backward(loss, count=len(y))
        if acc.step():
            running += acc.loss
    acc.flush()
    return running
