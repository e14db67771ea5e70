"""The correct twins of round2_classes_bad.py: nothing to report."""
from functools import partial

import torch


class MixedPrecision:
    def __init__(self):
        self.loss_scaler = torch.amp.GradScaler("cpu")

    def backward(self, loss):
        self.loss_scaler.scale(loss).backward()

    def unscale(self, optimizer):
        self.loss_scaler.unscale_(optimizer)

    def step(self, optimizer):
        self.loss_scaler.step(optimizer)
        self.loss_scaler.update()


class PluginTrainer:
    def __init__(self, net, optimizer):
        self.net, self.optimizer = net, optimizer
        self.precision = MixedPrecision()
        self.limit = partial(torch.nn.utils.clip_grad_norm_, max_norm=1.0)

    def train_step(self, x, y):
        self.precision.backward(((self.net(x) - y) ** 2).mean())
        self.precision.unscale(self.optimizer)
        self.limit(self.net.parameters())
        self.precision.step(self.optimizer)
        self.optimizer.zero_grad()


class Meter:
    def __init__(self):
        self.total = 0.0

    def add(self, value):
        self.total += value


def logged_in_a_meter(net, optimizer, loader):
    meter = Meter()
    for x, y in loader:
        optimizer.zero_grad()
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        meter.add(loss.item())
    return meter.total


def logged_per_term(net, optimizer, loader):
    sums = {"fit": 0.0, "reg": 0.0}
    for x, y in loader:
        terms = {"fit": ((net(x) - y) ** 2).mean(), "reg": 1e-3 * sum(p.pow(2).sum() for p in net.parameters())}
        optimizer.zero_grad()
        (terms["fit"] + terms["reg"]).backward()
        optimizer.step()
        for key in terms:
            sums[key] += terms[key].item()
    return sums


def micro_batches(net, xs, ys, width):
    for start in range(0, len(xs), width):
        err = ((net(xs[start : start + width]) - ys[start : start + width]) ** 2).mean()
        (err * width / len(xs)).backward()


def train_in_slices(net, optimizer, batches):
    for xs, ys in batches:
        optimizer.zero_grad()
        micro_batches(net, xs, ys, 4)
        optimizer.step()


def epochs_with_a_running_window(net, optimizer, loader, epochs, accum):
    updates = 0
    optimizer.zero_grad()
    for _ in range(epochs):
        for x, y in loader:
            (((net(x) - y) ** 2).mean() / accum).backward()
            updates += 1
            if updates % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    if updates % accum:
        for p in net.parameters():
            p.grad *= accum / (updates % accum)
        optimizer.step()
        optimizer.zero_grad()
