"""multispectral-object-detection train.py: the YOLOv5-style optimizer groups collect BatchNorm weights, other modules' `.weight` and every `.bias`, so the fusion transformer's learnable position embedding `self.pos_emb` (a bare nn.Parameter) is in no group: it receives gradients every step, no optimizer applies them, and `optimizer.zero_grad()` never clears them.

source: DocF/multispectral-object-detection#77 (https://github.com/DocF/multispectral-object-detection/issues/77), "bug：嵌入位置的参数self.pos_emb不更新" (the position-embedding parameter self.pos_emb is not updated): "需要在优化组里面添加该组参数进行优化" (this parameter group must be added to the optimizer groups to be optimised). The issue is open without a reply. The code was not read: the grouping follows YOLOv5's train.py, which the project is built on (for k, v in model.named_modules(): if hasattr(v, 'bias') and isinstance(v.bias, nn.Parameter): pg2.append(v.bias); if isinstance(v, nn.BatchNorm2d): pg0.append(v.weight); elif hasattr(v, 'weight') and isinstance(v.weight, nn.Parameter): pg1.append(v.weight)); the two-stream backbone and its transformer fusion are reduced to two conv streams and a fusion block with self.pos_emb = nn.Parameter(torch.zeros(1, n, d)) added to the tokens. The twin adds the embedding to the decayed group, as the issue asks
family: orphan
shape: pg0 (BatchNorm weights, SGD lr=0.01, momentum=0.937, nesterov), pg1 (other weights, weight_decay=5e-4), pg2 (biases); per batch: loss = model(rgb, ir) head loss; optimizer.zero_grad(); loss.backward(); optimizer.step(); 6 batches
numeric: the position embedding never moves from its initial value
watch: GG106
lint: out: which parameters the grouping loop collects depends on the module types at run time
bug-step: 1
"""
import torch
import torch.nn as nn

import _gb


class TransformerFusion(nn.Module):
    def __init__(self, d=8, n=16):
        super().__init__()
        self.pos_emb = nn.Parameter(torch.zeros(1, 2 * n, d))
        self.que_proj, self.key_proj, self.val_proj = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, rgb, ir):
        tokens = torch.cat([rgb.flatten(2), ir.flatten(2)], 2).transpose(1, 2) + self.pos_emb
        q, k, v = self.que_proj(tokens), self.key_proj(tokens), self.val_proj(tokens)
        att = torch.softmax(q @ k.transpose(1, 2) / q.size(-1) ** 0.5, -1)
        return self.ln(tokens + att @ v)


class TwoStream(nn.Module):
    def __init__(self):
        super().__init__()
        self.rgb = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.SiLU())
        self.ir = nn.Sequential(nn.Conv2d(1, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.SiLU())
        self.fusion = TransformerFusion()
        self.head = nn.Linear(8, 5)

    def forward(self, rgb, ir):
        return self.head(self.fusion(self.rgb(rgb), self.ir(ir)).mean(1))


_gb.setup()
model = TwoStream()
_gb.start(model)
pg0, pg1, pg2 = [], [], []  # optimizer parameter groups
for k, v in model.named_modules():
    if hasattr(v, "bias") and isinstance(v.bias, nn.Parameter):
        pg2.append(v.bias)  # biases
    if isinstance(v, nn.BatchNorm2d):
        pg0.append(v.weight)  # no decay
    elif hasattr(v, "weight") and isinstance(v.weight, nn.Parameter):
        pg1.append(v.weight)  # apply decay
    # FIX: if hasattr(v, "pos_emb") and isinstance(v.pos_emb, nn.Parameter):
    # FIX:     pg1.append(v.pos_emb)
optimizer = torch.optim.SGD(pg0, lr=0.01, momentum=0.937, nesterov=True)
optimizer.add_param_group({"params": pg1, "weight_decay": 5e-4})
optimizer.add_param_group({"params": pg2})
for _ in range(6):
    rgb, ir, target = torch.randn(2, 3, 8, 8), torch.randn(2, 1, 8, 8), torch.randn(2, 5)
    loss = ((model(rgb, ir) - target) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(model)
