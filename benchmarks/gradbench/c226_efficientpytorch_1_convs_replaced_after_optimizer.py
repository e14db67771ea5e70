"""EfficientPyTorch's prune-and-quantize training: the optimizer is built on the model's parameters and only then does `wrapper.replace_conv_recursively(model, 'Conv2dSQ', ...)` swap every `nn.Conv2d` for a new `Conv2dSQ` module (sparse, quantized convolution initialised from the old weights), so the optimizer holds the replaced layers' old parameters: the new convolutions receive gradients but are in no optimizer and never update, while the old tensors sit in the optimizer with no gradient.

source: hustzxd/EfficientPyTorch#1 (https://github.com/hustzxd/EfficientPyTorch/issues/1), "Optimizer BUG" (labelled bug, opened by the author): "Please define optimizer after Conv2D replacement." with the corrected order (replace_conv_recursively, then `criterion = ...; optimizer = get_optimizer(model, args)`). The repository's Conv2dSQ and wrapper were not read: the replacement is written anew (a Conv2d subclass with a straight-through weight quantizer, copying the old weight and bias); the ImageNet network is reduced to two convolutions and a linear head on 8x8 inputs. The twin builds the optimizer after the replacement, the author's fix
family: orphan
shape: SGD(lr=0.05, momentum=0.9); 6 steps on batches of 16 images 3x8x8
numeric: the convolutions never move; only the linear head trains
watch: GG106
lint: out: which modules replace_conv_recursively swaps is decided when it runs
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Conv2dSQ(torch.nn.Conv2d):
    """A convolution whose weight is quantized to 4 bits in the forward pass (straight-through gradient)."""

    def forward(self, x):
        scale = self.weight.detach().abs().max() / 7
        wq = self.weight + (torch.round(self.weight / scale) * scale - self.weight).detach()
        return F.conv2d(x, wq, self.bias, self.stride, self.padding)


def replace_conv_recursively(module):
    for name, child in module.named_children():
        if type(child) is torch.nn.Conv2d:
            new = Conv2dSQ(child.in_channels, child.out_channels, child.kernel_size, padding=child.padding)
            with torch.no_grad():
                new.weight.copy_(child.weight)
                new.bias.copy_(child.bias)
            setattr(module, name, new)
        else:
            replace_conv_recursively(child)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1),
                            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # BUG
replace_conv_recursively(model)
# FIX: optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
_gb.start(model)
data = [(torch.randn(16, 3, 8, 8), torch.randint(0, 5, (16,))) for _ in range(6)]
for x, y in data:
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
_gb.done(model)
