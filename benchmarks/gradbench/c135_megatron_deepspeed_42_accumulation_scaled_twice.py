"""Megatron-DeepSpeed, no pipeline parallelism: forward_step divides each micro-batch's loss by the number of micro-batches, and the DeepSpeed engine's backward divides it by gradient_accumulation_steps again, so every window's gradient is 1/K of the mean.

source: deepspeedai/Megatron-DeepSpeed#42 (https://github.com/deepspeedai/Megatron-DeepSpeed/pull/42, merged), "Fix grad accum double scaling bug under no pp mode". Only the title was read, not the diff: the mechanism follows it and the documented DeepSpeed behaviour (deepspeedai/DeepSpeed#7439, tjruwase: "By default DS will scale loss by gradient accumulation steps" in engine.backward, unless scale_wrt_gas=False). The engine is reduced to its accumulation bookkeeping (backward divides by gradient_accumulation_steps as _scale_loss_by_gas does; step() steps and clears the optimizer at the accumulation boundary); forward_step divides by get_num_microbatches() as Megatron's schedule does without DeepSpeed. The twin keeps one division (the engine's)
family: overscaled
shape: for each of K = 4 micro-batches: loss = forward_step(batch) (= mean loss / num_microbatches); engine.backward(loss); engine.step(). Engine: backward divides by gradient_accumulation_steps and calls loss.backward(); step() counts micro-steps and at every K-th one calls optimizer.step(); optimizer.zero_grad(). SGD(lr=0.1, momentum=0.9), 4 windows
numeric: every step applies 1/4 of the window mean's gradient
watch: GG113
lint: GG113
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

NUM_MICROBATCHES = 4


def get_num_microbatches():
    return NUM_MICROBATCHES


class DeepSpeedEngine:
    """The accumulation bookkeeping of deepspeed.DeepSpeedEngine (backward scales the loss by the steps)."""

    def __init__(self, module, optimizer, gradient_accumulation_steps):
        self.module, self.optimizer = module, optimizer
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.micro_steps = 0

    def __call__(self, *args):
        return self.module(*args)

    def is_gradient_accumulation_boundary(self):
        return (self.micro_steps + 1) % self.gradient_accumulation_steps == 0

    def backward(self, loss, scale_wrt_gas=True):
        if scale_wrt_gas and self.gradient_accumulation_steps > 1:
            loss = loss / self.gradient_accumulation_steps
        loss.backward()

    def step(self):
        if self.is_gradient_accumulation_boundary():
            self.optimizer.step()
            self.optimizer.zero_grad()
        self.micro_steps += 1


def forward_step(model, batch):
    x, y = batch
    output_tensor = F.mse_loss(model(x), y)
    output_tensor = output_tensor / get_num_microbatches()  # BUG
    return output_tensor


_gb.setup()
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
_gb.start(net)
engine = DeepSpeedEngine(net, torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9), get_num_microbatches())
data = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(16)]
for batch in data:
    loss = forward_step(engine, batch)
    engine.backward(loss)
    engine.step()
_gb.done(net)
