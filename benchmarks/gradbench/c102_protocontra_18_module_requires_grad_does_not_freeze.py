"""ProtoContra-SFDA: `self.model.outc.requires_grad = False` sets an attribute on the module, not on its parameters, so the layer meant to stay frozen is trained.

source: CSCYQJ/MICCAI23-ProtoContra-SFDA#18 (https://github.com/CSCYQJ/MICCAI23-ProtoContra-SFDA/issues/18), "Implementation bug? It seems like the last layer is not frozen?": "I noticed that you freeze the last layer with this line: self.model.outc.requires_grad = False. But outc is nn.module ... this does not freeze the last layer" (comparing the source model with the adapted one); a second user: "I think you're right. I've tried to define the trainable parameters in the optimizer, it seems work." The twin freezes the parameters (Module.requires_grad_(False))
family: frozen-not-frozen
shape: class Trainer: __init__: self.model = UNet(...); self.model.outc.requires_grad = False; self.optimizer = Adam(self.model.parameters(), lr); train step: self.optimizer.zero_grad(); loss = prototype/contrastive loss on the target batch; loss.backward(); self.optimizer.step()
numeric: the classifier head (outc) moves at every step although the method keeps it fixed
watch: out: a parameter that was meant to be frozen looks like any trainable one at run time; the intent is not in the program's state
lint: out: no rule covers an attribute assignment on a module that reads like freezing
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class UNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inc = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU())
        self.down = torch.nn.Sequential(torch.nn.Linear(24, 24), torch.nn.ReLU())
        self.outc = torch.nn.Linear(24, 4)

    def forward(self, x):
        feat = self.down(self.inc(x))
        return self.outc(feat), feat


class Trainer:
    def __init__(self, lr=1e-3):
        self.model = UNet()
        _gb.start(self.model)
        self.model.outc.requires_grad = False  # BUG
        # FIX: self.model.outc.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)

    def train_step(self, x):
        self.optimizer.zero_grad()
        logits, feat = self.model(x)
        prob = F.softmax(logits, dim=1)
        pseudo = prob.argmax(dim=1)
        prototypes = torch.stack([(prob[:, k:k + 1] * feat).sum(0) / (prob[:, k].sum() + 1e-6) for k in range(4)])
        contrast = F.cross_entropy(F.normalize(feat, dim=1) @ F.normalize(prototypes, dim=1).t() / 0.1, pseudo)
        entropy = -(prob * torch.log(prob + 1e-6)).sum(1).mean()
        loss = contrast + entropy
        loss.backward()
        self.optimizer.step()
        return loss.item()


_gb.setup()
trainer = Trainer()
for x in (torch.randn(16, 12) for _ in range(10)):
    trainer.train_step(x)
_gb.done(trainer.model)
