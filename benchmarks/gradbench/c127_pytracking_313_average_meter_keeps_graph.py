"""pytracking LTRTrainer: `_update_stats()` feeds the actor's loss tensor, graph and all, to an AverageMeter whose running sum (and, at each epoch's end, its history of averages) keeps every batch's autograd graph alive.

source: visionml/pytracking#313 (https://github.com/visionml/pytracking/pull/313), "Fix memory leak in LTRTrainer._update_stats().": "The method _update_stats() is called with val, which is a Tensor with gradients. When use with AverageMeter, the gradient graph will be accumulated during training and won't be released and collected by GC, causing significant memory leak." martin-danelljan (maintainer): "val is not necessarily always a tensor. So we need to have a check if its actually a tensor first." (open: unconfirmed as merged). The tracker network and actor are reduced to an MLP regression; AverageMeter and the stats update follow ltr/trainers' shape (self.sum += val * n; self.avg = self.sum / self.count; new_epoch() appends avg to history). The twin converts a tensor to a number first, the check the maintainer asks for
family: graph-logging
shape: class AverageMeter: update(self, val, n=1): self.val = val; self.sum += val * n; self.count += n; self.avg = self.sum / self.count; new_epoch(self): if self.count > 0: self.history.append(self.avg); self.reset(). LTRTrainer.cycle_dataset: for i, data in enumerate(loader, 1): loss, stats = self.actor(data); self.optimizer.zero_grad(); loss.backward(); self.optimizer.step(); self._update_stats(stats, batch_size, loader) with stats = {'Loss/total': loss}. Adam, 6 iterations per epoch, 3 epochs
numeric: the meters' sums and the epoch history reach the graph of every training iteration of the run
watch: out: the meter holds graph nodes, not gradient; the watch follows .grad
lint: out: the sum happens inside a meter's method fed through a stats dict, not as a sum of the loss in the loop
bug-step: end
"""
from collections import OrderedDict

import torch
import torch.nn.functional as F

import _gb


class AverageMeter:
    def __init__(self):
        self.reset()
        self.history = []

    def reset(self, clear_history=False):
        self.val, self.avg, self.sum, self.count = 0, 0, 0, 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def new_epoch(self):
        if self.count > 0:
            self.history.append(self.avg)
            self.reset()


class Actor:
    def __init__(self, net):
        self.net = net

    def __call__(self, data):
        loss = F.smooth_l1_loss(self.net(data["train_images"]), data["train_anno"])
        return loss, {"Loss/total": loss}


class LTRTrainer:
    def __init__(self, actor, loaders, optimizer):
        self.actor, self.loaders, self.optimizer = actor, loaders, optimizer
        self.stats = OrderedDict({name: None for name in loaders})

    def _update_stats(self, new_stats, batch_size, loader):
        if self.stats[loader] is None:
            self.stats[loader] = OrderedDict({name: AverageMeter() for name in new_stats})
        for name, val in new_stats.items():
            # FIX: val = val.item() if torch.is_tensor(val) else val
            self.stats[loader][name].update(val, batch_size)

    def cycle_dataset(self, loader):
        for i, data in enumerate(self.loaders[loader], 1):
            loss, stats = self.actor(data)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self._update_stats(stats, data["train_images"].size(0), loader)

    def train_epoch(self):
        self.cycle_dataset("train")
        for val in (self.stats["train"] or {}).values():
            val.new_epoch()


_gb.setup()
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
_gb.start(net)
loaders = {"train": [{"train_images": x, "train_anno": x[:, :4] * 0.5} for x in (torch.randn(8, 16) for _ in range(6))]}
trainer = LTRTrainer(Actor(net), loaders, torch.optim.Adam(net.parameters(), lr=1e-3))
for epoch in range(3):
    trainer.train_epoch()
meter = trainer.stats["train"]["Loss/total"]
_gb.done(net, kept=[a for a in meter.history if torch.is_tensor(a)])
