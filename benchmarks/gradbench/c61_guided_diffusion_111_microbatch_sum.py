"""guided-diffusion TrainLoop.forward_backward: the micro-batch losses are not divided by the number of micro-batches.

source: openai/guided-diffusion#111 (https://github.com/openai/guided-diffusion/issues/111), "Is there a bug on grad accumulation?": in train_util.py forward_backward, "the grads of each microbatch are not devided by the number of microbatchs, causing the grad of a batch is actually the summation of all the microbatchs" (open; the mechanism is checked by running it here)
family: unscaled
shape: for i in range(0, batch.shape[0], self.microbatch): losses = compute_losses(micro); loss = (losses["loss"] * weights).mean(); self.mp_trainer.backward(loss) (loss.backward()); then optimize: self.opt.step()
numeric: with batch 8 and microbatch 2 each step's gradient is 4x the batch mean
watch: GG104
lint: GG104
bug-step: 1
"""
import torch

import _gb


class TrainLoop:
    def __init__(self, batch_size=8, microbatch=2):
        self.model = torch.nn.Sequential(torch.nn.Linear(5, 10), torch.nn.SiLU(), torch.nn.Linear(10, 5))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.batch_size, self.microbatch = batch_size, microbatch

    def forward_backward(self, batch):
        self.opt.zero_grad()
        for i in range(0, batch.shape[0], self.microbatch):
            micro = batch[i: i + self.microbatch]
            noise = torch.randn_like(micro)
            weights = torch.ones(len(micro))
            losses = {"loss": ((self.model(micro + noise) - noise) ** 2).mean(-1)}
            loss = (losses["loss"] * weights).mean()
            # FIX: loss = loss * len(micro) / batch.shape[0]
            loss.backward()

    def run_step(self, batch):
        self.forward_backward(batch)
        self.opt.step()


_gb.setup()
loop = TrainLoop()
_gb.start(loop.model)
for _ in range(4):
    loop.run_step(torch.randn(8, 5))
_gb.done(loop.model)
