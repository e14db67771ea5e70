"""Truxify's MAML: the inner (adaptation) loop updates a copy of the model through `param.data -= inner_lr * grad`, which detaches the step from the graph, so the query loss has no path back to the meta-model's parameters; `meta_loss.backward()` leaves their `.grad` None and the outer optimizer never updates them.

source: KanishJebaMathewM/Truxify#13118 (https://github.com/KanishJebaMathewM/Truxify/issues/13118), "MAML inner-loop `param.data -=` detaches the graph — the meta-model never trains": "grads = torch.autograd.grad(loss, adapted_model.parameters(), create_graph=True); for param, grad in zip(adapted_model.parameters(), grads): param.data -= self.inner_lr * grad ... self.outer_update(meta_loss) # meta_loss.backward() on self.model.parameters() ... Writing through `param.data` **detaches** the inner step from the autograd graph. The query loss graph therefore has no path back to `self.model.parameters()`, so `meta_loss.backward()` leaves their `.grad` as `None`". backend/ml/meta/model.py was not read beyond the issue's excerpt; `inner_update` is taken to adapt a deep copy of the model (the issue's adapted_model), the tasks are made-up linear regressions. The twin keeps the inner step in the graph with torch.func.functional_call, the issue's expected behaviour
family: orphan
shape: Adam(lr=1e-2) on the meta-model, 4 tasks per meta-step, one inner SGD step (inner_lr 0.1), 3 meta-steps
numeric: the meta-model keeps its initial values in the bug
watch: GG110
lint: out: whether an update through .data keeps the graph is a property of the autograd call, not of where the buffers are cleared and stepped
bug-step: 1
"""
import copy

import torch
import torch.nn.functional as F

import _gb

inner_lr = 0.1
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
_gb.start(model)
meta_optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)


def inner_update(model, x, y):
    adapted_model = copy.deepcopy(model)
    loss = F.mse_loss(adapted_model(x), y)
    grads = torch.autograd.grad(loss, adapted_model.parameters(), create_graph=True)
    for param, grad in zip(adapted_model.parameters(), grads):
        param.data -= inner_lr * grad
    return adapted_model


for meta_step in range(3):
    meta_loss = 0.0
    for task in range(4):
        w = torch.randn(4, 1)
        support_x, query_x = torch.randn(8, 4), torch.randn(8, 4)
        support_y, query_y = support_x @ w, query_x @ w
        adapted_model = inner_update(model, support_x, support_y)  # BUG
        meta_loss = meta_loss + F.mse_loss(adapted_model(query_x), query_y)  # BUG
        # FIX: params = dict(model.named_parameters())
        # FIX: grads = torch.autograd.grad(F.mse_loss(torch.func.functional_call(model, params, (support_x,)), support_y), list(params.values()), create_graph=True)
        # FIX: adapted = {name: p - inner_lr * g for (name, p), g in zip(params.items(), grads)}
        # FIX: meta_loss = meta_loss + F.mse_loss(torch.func.functional_call(model, adapted, (query_x,)), query_y)
    meta_optimizer.zero_grad()
    if meta_loss.requires_grad:
        meta_loss.backward()
    meta_optimizer.step()
_gb.done(model)
