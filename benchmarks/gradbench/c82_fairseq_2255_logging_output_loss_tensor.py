"""fairseq masked_lm criterion: logging_output carries the loss tensor itself, and the metrics meters sum it across updates.

source: facebookresearch/fairseq#2255 (https://github.com/facebookresearch/fairseq/issues/2255), "memory leakage caused by logging_output in criterion \"masked_lm\"": "logging_output = {'loss': loss, ...}" fixed with "'loss': loss.data"; maintainer: "Landed in https://github.com/pytorch/fairseq/commit/8eb9123f560d32940f96a01369d61c1684dce085"
family: graph-logging
shape: MaskedLmLoss.forward(model, sample): logits = model(...); loss = F.nll_loss(..., reduction="sum"); logging_output = {"loss": loss, "ntokens": ..., "sample_size": sample_size}; return loss, sample_size, logging_output. The trainer back-propagates loss and steps; reduce_metrics sums logging_output["loss"] into a meter (AverageMeter.update: self.sum += val * n) for the log interval
numeric: the meter's sum reaches every update's autograd nodes until the log is written ("The memory usage was increasing when the training proceeded")
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import math

import torch
import torch.nn.functional as F

import _gb


class AverageMeter:
    def __init__(self):
        self.sum, self.count = 0, 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n


class MaskedLmLoss:
    def forward(self, model, sample):
        logits = model(sample["net_input"])
        targets = sample["target"]
        loss = F.cross_entropy(logits, targets, reduction="sum")
        sample_size = targets.numel()
        logging_output = {
            "loss": loss,  # BUG
            # FIX: "loss": loss.data,
            "ntokens": sample_size,
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output


def reduce_metrics(meters, logging_outputs):
    loss_sum = sum(log.get("loss", 0) for log in logging_outputs)
    sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
    meters["loss"].update(loss_sum / sample_size / math.log(2), sample_size)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(20, 16), torch.nn.Linear(16, 20))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = MaskedLmLoss()
meters = {"loss": AverageMeter()}
for update in range(8):
    tokens = torch.randint(0, 20, (12,))
    sample = {"net_input": tokens, "target": tokens.roll(1)}
    loss, sample_size, logging_output = criterion.forward(model, sample)
    (loss / sample_size).backward()
    optimizer.step()
    optimizer.zero_grad()
    reduce_metrics(meters, [logging_output])
_gb.done(model, kept=meters["loss"].sum)
