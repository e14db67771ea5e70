"""YOLOv5 train.py: the layers listed in `freeze` get requires_grad = False, and the optimizer's parameter-group loop sets requires_grad = True on every parameter again.

source: ultralytics/yolov5#1213 (https://github.com/ultralytics/yolov5/issues/1213), "parameters freeze invalid": "In this line, we set freeze parameters with requires_grad=False, https://github.com/ultralytics/yolov5/blob/453acdec67202e15b772370d31eb196d844f2892/train.py#L88 However, in the following line, all paremters have been set as requires_grad=True, which overwrite the previous settings. (train.py#L97)"; glenn-jocher: "thank you for your feedback. This item is currently a TODO". The twin drops the overwrite, so the frozen layers stay frozen
family: frozen-not-frozen
shape: train(): freeze = ['model.0.', ...]; for k, v in model.named_parameters(): v.requires_grad = True; if any(x in k for x in freeze): print('freezing %s' % k); v.requires_grad = False. Then: pg0, pg1, pg2 = [], [], []; for k, v in model.named_parameters(): v.requires_grad = True; if '.bias' in k: pg2.append(v) elif '.weight' in k and '.bn' not in k: pg1.append(v) else: pg0.append(v); optimizer = SGD(pg0, lr, momentum, nesterov=True); add_param_group(pg1 with weight_decay); add_param_group(pg2)
numeric: the layers named in `freeze` are updated at every step
watch: out: a parameter that was meant to be frozen looks like any trainable one at run time; the intent is not in the program's state
lint: out: no rule relates a requires_grad assignment to an earlier one
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Conv(torch.nn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        self.conv = torch.nn.Linear(c1, c2, bias=False)
        self.bn = torch.nn.BatchNorm1d(c2)
        self.act = torch.nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Sequential(Conv(10, 16), Conv(16, 16), torch.nn.Linear(16, 6))

    def forward(self, x):
        return self.model(x)


def train(model, dataloader, hyp, freeze):
    for k, v in model.named_parameters():
        v.requires_grad = True  # train all layers
        if any(x in k for x in freeze):
            print('freezing %s' % k)
            v.requires_grad = False
    pg0, pg1, pg2 = [], [], []  # optimizer parameter groups
    for k, v in model.named_parameters():
        v.requires_grad = True  # BUG
        if '.bias' in k:
            pg2.append(v)  # biases
        elif '.weight' in k and '.bn' not in k:
            pg1.append(v)  # apply weight decay
        else:
            pg0.append(v)  # all else
    optimizer = torch.optim.SGD(pg0, lr=hyp['lr0'], momentum=hyp['momentum'], nesterov=True)
    optimizer.add_param_group({'params': pg1, 'weight_decay': hyp['weight_decay']})
    optimizer.add_param_group({'params': pg2})
    model.train()
    for imgs, targets in dataloader:
        pred = model(imgs)
        loss = F.binary_cross_entropy_with_logits(pred, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


_gb.setup()
model = Model()
_gb.start(model)
dataloader = [(x, (x[:, :6] > 0).to(x.dtype)) for x in (torch.randn(8, 10) for _ in range(10))]
train(model, dataloader, {'lr0': 0.01, 'momentum': 0.937, 'weight_decay': 5e-4}, freeze=['model.0.'])
_gb.done(model)
