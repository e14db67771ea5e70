"""The Annotated Transformer: SimpleLossCompute back-propagates the validation loss, which the next epoch's first step applies.

source: harvardnlp/annotated-transformer#14 (https://github.com/harvardnlp/annotated-transformer/issues/14), "loss.backward() inside SimpleLossCompute": "`loss.backward()` is called even if `opt` is None, i.e. during validation"; a reply: "I verified that this _trains_ the model towards the validation data"
family: leaked-pass
shape: class SimpleLossCompute: __call__(x, y, norm): x = self.generator(x); loss = self.criterion(...) / norm; loss.backward(); if self.opt is not None: self.opt.step(); self.opt.optimizer.zero_grad(). Training: for epoch: model.train(); run_epoch(train, model, SimpleLossCompute(generator, criterion, model_opt)); model.eval(); run_epoch(valid, model, SimpleLossCompute(generator, criterion, None)). Fixed (as in the reply): backward only when there is an optimizer
numeric: from the second epoch on, the first step of each epoch applies the gradient of every validation batch of the previous epoch on top of its own
watch: GG114
lint: GG114
bug-step: 4
"""
import torch

import _gb


class SimpleLossCompute:
    "A simple loss compute and train function."

    def __init__(self, generator, criterion, opt=None):
        self.generator, self.criterion, self.opt = generator, criterion, opt

    def __call__(self, x, y, norm):
        x = self.generator(x)
        loss = self.criterion(x.reshape(-1, x.size(-1)), y.reshape(-1)) / norm
        loss.backward()  # BUG
        if self.opt is not None:
            # FIX: loss.backward()
            self.opt.step()
            self.opt.zero_grad()
        return loss.item() * norm


def run_epoch(batches, model, loss_compute):
    total = 0.0
    for src, tgt in batches:
        out = model(src)
        total += loss_compute(out, tgt, tgt.numel())
    return total


_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(12, 16), torch.nn.Linear(16, 16), torch.nn.Tanh())
generator = torch.nn.Linear(16, 12)
_gb.start(model, generator)
criterion = torch.nn.CrossEntropyLoss(reduction="sum")
model_opt = torch.optim.SGD(list(model.parameters()) + list(generator.parameters()), lr=0.05)
train = [(s, s.flip(-1)) for s in (torch.randint(0, 12, (4, 6)) for _ in range(3))]
valid = [(s, s.flip(-1)) for s in (torch.randint(0, 12, (4, 6)) for _ in range(2))]
for epoch in range(3):
    model.train()
    run_epoch(train, model, SimpleLossCompute(generator, criterion, model_opt))
    model.eval()
    run_epoch(valid, model, SimpleLossCompute(generator, criterion, None))
_gb.done(model, generator)
