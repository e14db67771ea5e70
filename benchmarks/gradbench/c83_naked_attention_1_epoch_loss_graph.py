"""NakedAttention: the epoch's average loss is accumulated from the batch loss tensors, so the graph grows across the epoch.

source: jostmey/NakedAttention#1 (https://github.com/jostmey/NakedAttention/issues/1), "Memory issues caused by += with pytorch graph objects": "e_train += e_batch/len(loader_train)" should be "e_train += e_batch.detach()/len(loader_train)" (and the same for a_train); the author: "Fixed. Thanks!!"
family: graph-logging
shape: for x_batch, y_batch in loader_train: logits = model(x_batch); e_batch = loss(logits, y_batch); a_batch = accuracy of the probabilities; optimizer.zero_grad(); e_batch.backward(); optimizer.step(); e_train += e_batch/len(loader_train); a_train += a_batch/len(loader_train)
numeric: e_train and a_train reach one autograd node chain per batch of the epoch (out of memory in a Kaggle notebook, per the issue)
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 2))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loader_train = [(x, (x.sum(dim=1) > 0).long()) for x in (torch.randn(8, 12) for _ in range(10))]
e_train, a_train = 0.0, 0.0
for x_batch, y_batch in loader_train:
    logits = model(x_batch)
    probabilities = torch.softmax(logits, dim=1)
    e_batch = F.cross_entropy(logits, y_batch)
    a_batch = torch.gather(probabilities, 1, y_batch[:, None]).mean()
    optimizer.zero_grad()
    e_batch.backward()
    optimizer.step()
    e_train += e_batch / len(loader_train)  # BUG
    a_train += a_batch / len(loader_train)  # BUG
    # FIX: e_train += e_batch.detach() / len(loader_train)
    # FIX: a_train += a_batch.detach() / len(loader_train)
_gb.done(model, kept=[e_train, a_train])
