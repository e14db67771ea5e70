"""SynSin custom batch-norm: stored_mean and stored_var are running averages of tensors that carry the graph.

source: facebookresearch/synsin#20 (https://github.com/facebookresearch/synsin/pull/20), "Memory leak in custom batch-norm" (merged): "The variables `self.stored_mean`, `self.stored_var` seem to only be used during inference, but are not protected from computing gradients, and thus are extending the computation graph on each call to `bn.forward()`" (~7MB/s, "training crashing after a couple days"); jcjohnson: "This indeed looks like a bug on our part"
family: graph-in-buffer
shape: class myBN(nn.Module) (the BigGAN-style batch-norm of ResNetEncoder/ResNetDecoder): forward(x, gain, bias): if self.training: out, mean, var = manual_bn(x, gain, bias, return_mean_var=True, eps=self.eps); self.stored_mean = self.stored_mean * (1 - self.momentum) + mean * self.momentum; self.stored_var = self.stored_var * (1 - self.momentum) + var * self.momentum; return out. Fixed: the running statistics computed without the graph (detached)
numeric: stored_mean and stored_var reach every training step's batch statistics: the graph grows at every forward
watch: GG202
lint: GG202
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


def manual_bn(x, gain, bias, return_mean_var=False, eps=1e-5):
    float_x = x
    m = torch.mean(float_x, [0, 2, 3], keepdim=True)
    m2 = torch.mean(float_x ** 2, [0, 2, 3], keepdim=True)
    var = m2 - m ** 2
    scale = torch.rsqrt(var + eps) * gain
    out = x * scale - m * scale + bias
    return (out, m.squeeze(), var.squeeze()) if return_mean_var else out


class myBN(torch.nn.Module):
    def __init__(self, num_channels, eps=1e-5, momentum=0.1):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.register_buffer("stored_mean", torch.zeros(num_channels))
        self.register_buffer("stored_var", torch.ones(num_channels))

    def forward(self, x, gain, bias):
        if self.training:
            out, mean, var = manual_bn(x, gain, bias, return_mean_var=True, eps=self.eps)
            # FIX: mean, var = mean.detach(), var.detach()
            self.stored_mean = self.stored_mean * (1 - self.momentum) + mean * self.momentum
            self.stored_var = self.stored_var * (1 - self.momentum) + var * self.momentum
            return out
        return F.batch_norm(x, self.stored_mean, self.stored_var, None, None, False, self.momentum, self.eps)


class ResNetBlock(torch.nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.gain = torch.nn.Parameter(torch.ones(1, channels, 1, 1))
        self.bias = torch.nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.bn = myBN(channels)

    def forward(self, x):
        return x + torch.relu(self.bn(self.conv(x), self.gain, self.bias))


_gb.setup()
encoder = ResNetBlock()
_gb.start(encoder)
optimizer = torch.optim.Adam(encoder.parameters(), lr=1e-3)
for it in range(10):
    img = torch.randn(2, 4, 6, 6)
    optimizer.zero_grad()
    loss = F.l1_loss(encoder(img), img.flip(-1))
    loss.backward()
    optimizer.step()
_gb.done(encoder, kept=[encoder.bn.stored_mean, encoder.bn.stored_var])
