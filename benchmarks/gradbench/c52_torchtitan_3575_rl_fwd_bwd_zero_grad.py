"""torchtitan RL trainer: zero_grad called inside fwd_bwd, so only the last micro-batch survives to optim_step.

source: pytorch/torchtitan#3575 (https://github.com/pytorch/torchtitan/pull/3575), "[rl][bug] Fix gradient accumulation zero grad": "We call it at the wrong place (fwd/bwd instead of optimizer step), zeroing grad from all micro-batches except the last one"
family: misplaced-clear
shape: class Trainer with fwd_bwd(microbatch): self.optimizer.zero_grad(); loss.backward() and optim_step(): self.optimizer.step(); a controller calls fwd_bwd for every micro-batch, then optim_step
numeric: every update is the last micro-batch's gradient alone
watch: GG102
lint: GG102
bug-step: 1
"""
import torch

import _gb


class Trainer:
    def __init__(self):
        self.model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)

    def fwd_bwd(self, microbatch, n_micro):
        self.optimizer.zero_grad()  # BUG
        x, advantages = microbatch
        logp = torch.log_softmax(torch.cat([self.model(x), torch.zeros(len(x), 1)], -1), -1)[:, 0]
        loss = -(logp * advantages).mean() / n_micro
        loss.backward()

    def optim_step(self):
        self.optimizer.step()
        # FIX: self.optimizer.zero_grad()


_gb.setup()
trainer = Trainer()
_gb.start(trainer.model)
for it in range(3):
    microbatches = [(torch.randn(5, 6), torch.randn(5)) for _ in range(3)]
    for mb in microbatches:
        trainer.fwd_bwd(mb, len(microbatches))
    trainer.optim_step()
_gb.done(trainer.model)
