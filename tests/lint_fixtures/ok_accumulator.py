"""Correct loops with gradguard.Accumulator: clearings that lose nothing of its window (GG102 stays silent)."""
import torch
import torch.nn.functional as F

import gradguard as gg


def no_clearing(model, loader):
    optimizer = torch.optim.AdamW(model.parameters())
    acc = gg.Accumulator(optimizer, steps=4)
    for x, y in loader:
        acc.backward(F.cross_entropy(model(x), y), count=len(y))
        acc.step()


def before_a_windows_first_micro_batch(model, loader):
    optimizer = torch.optim.AdamW(model.parameters())
    acc = gg.Accumulator(optimizer, steps=4)
    for x, y in loader:
        if acc.micro_step == 0:
            optimizer.zero_grad()
        acc.backward(F.cross_entropy(model(x), y), count=len(y))
        if acc.step():
            optimizer.zero_grad()


def one_micro_batch_per_window(model, loader):
    optimizer = torch.optim.AdamW(model.parameters())
    acc = gg.Accumulator(optimizer, steps=1)
    for x, y in loader:
        optimizer.zero_grad()
        acc.backward(F.cross_entropy(model(x), y), count=len(y))
        acc.step()


def another_optimizer(generator, discriminator, loader):
    opt_d = torch.optim.Adam(discriminator.parameters())
    opt_g = torch.optim.Adam(generator.parameters())
    acc = gg.Accumulator(opt_g, steps=4)
    for z, real in loader:
        opt_d.zero_grad()
        d_loss = discriminator(real).mean() - discriminator(generator(z).detach()).mean()
        d_loss.backward()
        opt_d.step()
        acc.backward(-discriminator(generator(z)).mean())
        acc.step()


def once_per_window_outside_its_micro_batch_loop(model, windows):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    acc = gg.Accumulator(optimizer, steps=4)
    for window in windows:
        optimizer.zero_grad()
        for x, y in window:
            acc.backward(F.mse_loss(model(x), y), count=len(x))
            acc.step()
