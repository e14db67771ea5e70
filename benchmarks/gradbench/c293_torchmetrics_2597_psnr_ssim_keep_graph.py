"""torchmetrics' PSNR (and SSIM) called in a CycleGAN's training_step on the generator's output: the metric's running state is updated from the undetached prediction, so the state tensors carry the autograd graph, each update chains the new batch's graph onto the previous state, and GPU memory grows until it overflows.

source: Lightning-AI/torchmetrics#2597 (https://github.com/Lightning-AI/torchmetrics/issues/2597), "GPU ram memory increase until overflow when using PSNR and SSIM" (bug / fix): the values returned in training_step carry grad_fn ("metrics aren't supposed to be attached to computational graph"), and the reporter's fix is to pass fake.detach(). torchmetrics' Metric code was not read; PSNR is reduced to an nn.Module with sum_squared_error and total tensor states updated by `state = state + batch value` at each call (the accumulation a metric state performs), the CycleGAN to one MLP generator trained with an L1 loss. The twin calls the metric on fake.detach(), the reporter's fix
family: graph-in-buffer
shape: Adam(lr=2e-4), 6 training steps of 8 images of 48 pixels, one metric call per step
numeric: the metric's state holds the graphs of all 6 steps, chained
watch: GG202
lint: GG202
bug-step: end
"""
import math

import torch
import torch.nn.functional as F

import _gb


class PeakSignalNoiseRatio(torch.nn.Module):
    def __init__(self, data_range=2.0):
        super().__init__()
        self.data_range = data_range
        self.sum_squared_error = torch.zeros(())
        self.total = torch.zeros(())

    def forward(self, preds, target):
        self.sum_squared_error = self.sum_squared_error + torch.sum((preds - target) ** 2)
        self.total = self.total + target.numel()
        return 10 * torch.log10(self.data_range ** 2 / (self.sum_squared_error / self.total))


_gb.setup()
generator = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.ReLU(), torch.nn.Linear(64, 48), torch.nn.Tanh())
_gb.start(generator)
optimizer = torch.optim.Adam(generator.parameters(), lr=2e-4)
train_psnr = PeakSignalNoiseRatio()
for step in range(6):
    real_a, real_b = torch.randn(8, 48).tanh(), torch.randn(8, 48).tanh()
    fake = generator(real_a)
    loss = F.l1_loss(fake, real_b)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    psnr = train_psnr(fake, real_b)  # BUG
    # FIX: psnr = train_psnr(fake.detach(), real_b)
_gb.done(generator, kept=[train_psnr.sum_squared_error])
