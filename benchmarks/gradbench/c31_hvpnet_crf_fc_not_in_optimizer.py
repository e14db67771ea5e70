"""HVPNeT: the CRF and classifier parameters are never added to the optimizer.

source: zjunlp/HVPNeT#5 (https://github.com/zjunlp/HVPNeT/issues/5), "Not putting parameters into optimizer but still trainable": in modules/train.py the crf and fc parameter groups were built but not appended to the optimizer's parameter list; the authors confirmed
family: orphan
shape: parameters = [bert group, ...]; params = {'params': [crf and fc parameters], 'lr': 5e-2}; the parameters.append(params) after it is missing; optimizer = AdamW(parameters)
numeric: the CRF/fc head never moves from its initialisation while its .grad grows every step (no zero_grad reaches it)
watch: GG106
lint: out: which parameters the loss reaches is known only at run time
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class NERModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = torch.nn.Sequential(torch.nn.Embedding(30, 12), torch.nn.Tanh())
        self.fc = torch.nn.Linear(12, 5)
        self.crf_transitions = torch.nn.Parameter(torch.zeros(5, 5))

    def forward(self, ids, tags):
        emissions = self.fc(self.bert(ids))
        path = emissions + self.crf_transitions[tags.roll(1, dims=1)]
        return F.cross_entropy(path.flatten(0, 1), tags.flatten())


_gb.setup()
model = NERModel()
_gb.start(model)
parameters = [{"params": model.bert.parameters(), "lr": 1e-2}]
params = {"params": [model.crf_transitions, *model.fc.parameters()], "lr": 5e-2}
# FIX: parameters.append(params)
optimizer = torch.optim.AdamW(parameters, weight_decay=0.0)
for step in range(6):
    ids, tags = torch.randint(0, 30, (4, 7)), torch.randint(0, 5, (4, 7))
    optimizer.zero_grad()
    loss = model(ids, tags)
    loss.backward()
    optimizer.step()
_gb.done(model)
