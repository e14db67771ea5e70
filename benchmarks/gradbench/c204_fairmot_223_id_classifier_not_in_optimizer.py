"""FairMOT training: the re-ID branch's classifier (`self.classifier = nn.Linear(self.emb_dim, self.nID)`) is created inside the loss module `MotLoss`, while the optimizer is built with `torch.optim.Adam(model.parameters(), opt.lr)`, so the classifier gets gradients from the ID loss on every step but is never updated and stays at its random initialisation.

source: ifzhang/FairMOT#223 (https://github.com/ifzhang/FairMOT/issues/223), "About trainable variables": "there are also trainable parameters in loss (eg. `self.classifier`) ... The optimizer seems only optimizes the parameters in DLASeg and does not optimize the parameters in MotLoss." The author (ifzhang): "I add them to the optimizer now and it can improve the performance of re-ID" (base_trainer.py). Read: the issue's code excerpt (MotLoss.__init__ with self.classifier; optimizer = torch.optim.Adam(model.parameters(), opt.lr)). The DLA-34 backbone and heads are reduced to an MLP with a detection head and an embedding head; the ID loss is the classifier's cross entropy on the embeddings, as in MotLoss; nID = 10 identities. The twin adds the loss module's parameters to the optimizer, the author's fix
family: orphan
shape: Adam(lr=1e-3) on the model (and, in the twin, the loss module); 6 steps on batches of 16
numeric: the ID classifier (10 x 16 weights and 10 biases) never moves; the embedding head trains against a random classifier
watch: GG106
lint: out: which parameters the loss module holds and reaches is known only at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU())
        self.hm = torch.nn.Linear(32, 1)
        self.id = torch.nn.Linear(32, 16)

    def forward(self, x):
        h = self.backbone(x)
        return self.hm(h), self.id(h)


class MotLoss(torch.nn.Module):
    def __init__(self, emb_dim=16, nID=10):
        super().__init__()
        self.classifier = torch.nn.Linear(emb_dim, nID)

    def forward(self, outputs, hm_target, ids):
        hm, id_head = outputs
        det_loss = F.binary_cross_entropy_with_logits(hm, hm_target)
        id_loss = F.cross_entropy(self.classifier(F.normalize(id_head, dim=1) * 8), ids)
        return det_loss + id_loss


_gb.setup()
model = Model()
loss_module = MotLoss()
_gb.start(model, loss_module)
optimizer = torch.optim.Adam(model.parameters(), 1e-3)  # BUG
# FIX: optimizer = torch.optim.Adam(list(model.parameters()) + list(loss_module.parameters()), 1e-3)
data = [(torch.randn(16, 20), torch.randint(0, 2, (16, 1)).double(), torch.randint(0, 10, (16,))) for _ in range(6)]
for x, hm_target, ids in data:
    loss = loss_module(model(x), hm_target.to(x.dtype), ids)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(model, loss_module)
