"""pytorch-unsupervised-segmentation's MyNet: the intermediate convolution and batch-norm layers are appended to plain Python lists (`self.conv2 = []`, `self.bn2 = []`), so their parameters are not registered with the module and the optimizer built on `model.parameters()` never updates them, although the forward pass runs through them and they receive gradients.

source: kanezaki/pytorch-unsupervised-segmentation#6 (https://github.com/kanezaki/pytorch-unsupervised-segmentation/pull/6), "fix param collection, apply black formatting": "I noticed that the conv and batch normalization layers were being added to a normal list on our module instance. This prevents methods like `train` and `params` from impacting those layers. This PR puts those layers in a `nn.ModuleList`". The author (kanezaki): "Thanks a lot for fixing the param collection! ... I'm going to close this PR and modify the `nn.ModuleList` part by myself." The network follows the pull request's description of MyNet (conv1/bn1, nConv - 1 intermediate conv/bn pairs, conv3/bn3, the argmax-label cross entropy of the unsupervised method), reduced to 8 channels on a 12x12 image with nConv = 3; the image and labels are random. The twin holds the lists in nn.ModuleList, the fix
family: orphan
shape: SGD(lr=0.1, momentum=0.9) on model.parameters(); 6 iterations on one 3x12x12 image
numeric: the 2 intermediate conv/bn pairs (about 1200 weights) never move
watch: GG106
lint: out: whether a module's layers are registered is decided by the container that holds them, when the module is built at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

nChannel, nConv = 8, 3


class MyNet(torch.nn.Module):
    def __init__(self, input_dim):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(input_dim, nChannel, kernel_size=3, stride=1, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(nChannel)
        self.conv2 = []  # BUG
        self.bn2 = []  # BUG
        # FIX: self.conv2 = torch.nn.ModuleList()
        # FIX: self.bn2 = torch.nn.ModuleList()
        for i in range(nConv - 1):
            self.conv2.append(torch.nn.Conv2d(nChannel, nChannel, kernel_size=3, stride=1, padding=1))
            self.bn2.append(torch.nn.BatchNorm2d(nChannel))
        self.conv3 = torch.nn.Conv2d(nChannel, nChannel, kernel_size=1, stride=1, padding=0)
        self.bn3 = torch.nn.BatchNorm2d(nChannel)

    def forward(self, x):
        x = self.bn1(F.relu(self.conv1(x)))
        for i in range(nConv - 1):
            x = self.bn2[i](F.relu(self.conv2[i](x)))
        return self.bn3(self.conv3(x))


def tracked(model):
    """The weights the case follows, whether registered or not, in the network's order."""
    mods = [model.conv1, model.bn1, *model.conv2, *model.bn2, model.conv3, model.bn3]
    return [p for m in mods for p in m.parameters()]


_gb.setup()
model = MyNet(3)
_gb.start(*tracked(model))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
data = torch.randn(1, 3, 12, 12)
for batch_idx in range(6):
    optimizer.zero_grad()
    output = model(data)[0].permute(1, 2, 0).reshape(-1, nChannel)
    target = output.detach().argmax(1)
    loss = F.cross_entropy(output, target)
    loss.backward()
    optimizer.step()
_gb.done(*tracked(model))
