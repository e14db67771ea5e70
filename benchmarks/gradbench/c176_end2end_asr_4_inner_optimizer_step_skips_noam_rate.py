"""end2end-asr-pytorch trainer: the model is optimised through a `NoamOpt` wrapper whose `step()` writes the warm-up learning rate into the inner Adam's parameter groups and then steps it, but the training loop calls `opt.optimizer.step()` on the inner Adam directly, so the rate stays at the value Adam was built with (its default 1e-3) and the Noam schedule never applies.

source: gentaiscool/end2end-asr-pytorch#4 (https://github.com/gentaiscool/end2end-asr-pytorch/issues/4), "Report bugs": "in line 97 of trainer/asr/trainer.py opt.optimizer.step() -> opt.step()". The author (gentaiscool): "Thank you for reporting. I should fix it soon." and then "I fixed the issue in #7". Read: utils/optimizer.py (NoamOpt.step increments its step count, sets p['lr'] = rate() on every param group of the inner optimizer, then calls self.optimizer.step()) and utils/functions.py (init_optimizer builds NoamOpt(dim_input, args.k_lr, warmup, torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)), no lr given, so Adam's default 1e-3); the trainer line is the issue's quote. The speech transformer is reduced to an MLP frame classifier, model_size 64, k_lr 1, warmup 20; the wrapper is written anew with the same rate formula. The twin calls opt.step(), the author's fix
family: wrong-optimizer
shape: NoamOpt(64, 1, 20) around Adam(betas=(0.9, 0.98), eps=1e-9); 10 steps on batches of 16
numeric: every step uses lr 1e-3 instead of the Noam rate (1.4e-3 at step 1, rising to 1.4e-2 at step 10)
watch: out: which learning rate the inner optimizer steps with is the wrapper's business; every gradient is applied once and cleared
lint: out: a wrapper's step and its inner optimizer's step are both optimizer steps; which one sets the schedule is the wrapper's code
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class NoamOpt:
    """Inverse-square-root warm-up: the wrapper sets the rate, then steps the optimizer it holds."""

    def __init__(self, model_size, factor, warmup, optimizer):
        self.optimizer, self.model_size, self.factor, self.warmup = optimizer, model_size, factor, warmup
        self._step = 0

    def rate(self):
        return self.factor * self.model_size ** -0.5 * min(self._step ** -0.5, self._step * self.warmup ** -1.5)

    def step(self):
        self._step += 1
        for group in self.optimizer.param_groups:
            group["lr"] = self.rate()
        self.optimizer.step()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(40, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
_gb.start(model)
opt = NoamOpt(64, 1, 20, torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9))
for i in range(10):
    x, y = torch.randn(16, 40), torch.randint(0, 10, (16,))
    opt.optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.optimizer.step()  # BUG
    # FIX: opt.step()
_gb.done(model)
