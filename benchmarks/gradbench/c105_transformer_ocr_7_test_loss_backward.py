"""Transformer-OCR train.py: the evaluation pass reuses SimpleLossCompute, which calls loss.backward() even without an optimizer, so the validation gradients are applied by the next epoch's first training step.

source: fengxinjie/Transformer-OCR#7 (https://github.com/fengxinjie/Transformer-OCR/issues/7), "testloss would lead to model update on eval mode": "In test_loss loss.backward() is performed, this mean grad is calculated. Then in train_loss, grad calculated by test_loss is used by opt.step()" (Sanster); the reporter agrees. The issue is open; the twin runs the evaluation epoch under torch.no_grad() and computes no backward without an optimizer, the fix proposed in the thread
family: leaked-pass
shape: class SimpleLossCompute: __call__(self, x, y, norm): x = self.generator(x); loss = self.criterion(x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1)) / norm; loss.backward(); if self.opt is not None: self.opt.step(); self.opt.optimizer.zero_grad(); return loss.item() * norm. for epoch: model.train(); run_epoch(train_dataloader, model, SimpleLossCompute(model.generator, criterion, model_opt)); model.eval(); test_loss = run_epoch(val_dataloader, model, SimpleLossCompute(model.generator, criterion, None)). NoamOpt around Adam(lr=0, betas=(0.9, 0.98), eps=1e-9), 4 training batches per epoch
numeric: the first step of every epoch after the first also applies the whole validation set's gradient
watch: GG114
lint: GG114
bug-step: 5
"""
import torch
import torch.nn.functional as F

import _gb


class NoamOpt:
    def __init__(self, model_size, factor, warmup, optimizer):
        self.optimizer, self._step, self.warmup, self.factor, self.model_size = optimizer, 0, warmup, factor, model_size

    def step(self):
        self._step += 1
        for p in self.optimizer.param_groups:
            p['lr'] = self.factor * (self.model_size ** (-0.5) * min(self._step ** (-0.5), self._step * self.warmup ** (-1.5)))
        self.optimizer.step()


class SimpleLossCompute:
    def __init__(self, generator, criterion, opt=None):
        self.generator, self.criterion, self.opt = generator, criterion, opt

    def __call__(self, x, y, norm):
        x = self.generator(x)
        loss = self.criterion(x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1)) / norm
        loss.backward()  # BUG
        # FIX: if self.opt is not None:
        # FIX:     loss.backward()
        if self.opt is not None:
            self.opt.step()
            self.opt.optimizer.zero_grad()
        return loss.item() * norm


class OCRModel(torch.nn.Module):
    def __init__(self, d_model=16, vocab=10):
        super().__init__()
        self.src_embed = torch.nn.Linear(8, d_model)
        self.decoder = torch.nn.Sequential(torch.nn.Linear(d_model, d_model), torch.nn.ReLU())
        self.generator = torch.nn.Sequential(torch.nn.Linear(d_model, vocab), torch.nn.LogSoftmax(dim=-1))

    def forward(self, src):
        return self.decoder(self.src_embed(src))


def run_epoch(dataloader, model, loss_compute):
    total_loss, total_tokens = 0.0, 0
    for src, tgt in dataloader:
        out = model(src)
        ntokens = tgt.numel()
        total_loss += loss_compute(out, tgt, ntokens)
        total_tokens += ntokens
    return total_loss / total_tokens


_gb.setup()
model = OCRModel()
_gb.start(model)
criterion = torch.nn.NLLLoss(reduction="sum")
model_opt = NoamOpt(16, 1, 4, torch.optim.Adam(model.parameters(), lr=0, betas=(0.9, 0.98), eps=1e-9))
train_dataloader = [(s, (s[..., 0] > 0).long() * 3 + (s[..., 1] > 0).long()) for s in (torch.randn(4, 6, 8) for _ in range(4))]
val_dataloader = [(s, (s[..., 0] > 0).long() * 3 + (s[..., 1] > 0).long()) for s in (torch.randn(4, 6, 8) for _ in range(2))]
for epoch in range(3):
    model.train()
    run_epoch(train_dataloader, model, SimpleLossCompute(model.generator, criterion, model_opt))
    model.eval()
    test_loss = run_epoch(val_dataloader, model, SimpleLossCompute(model.generator, criterion, None))  # BUG
    # FIX: with torch.no_grad():
    # FIX:     test_loss = run_epoch(val_dataloader, model, SimpleLossCompute(model.generator, criterion, None))
_gb.done(model)
