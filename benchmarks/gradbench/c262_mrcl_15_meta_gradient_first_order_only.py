"""MRCL/OML meta-training: the inner-loop gradient is taken with `torch.autograd.grad(loss, fast_weights)` without `create_graph=True`, so the adapted weights carry no second-order path and the meta-gradient that reaches `.grad` of the meta-parameters is the first-order approximation.

source: kjaved0/mrcl#15 (https://github.com/kjaved0/mrcl/issues/15), "Bug fix" (closed); the author: "First step is to set create_graph=True in the torch.autograd.grad function. Without this flag, the second order gradients are never computed and the code uses the first-order approximation -- far from ideal. ... The two changes boil down to changing: `grad = torch.autograd.grad(loss, fast_weights)` to `torch.autograd.grad(loss, self.net.get_adaptation_parameters(fast_weights), create_graph=True)` where get_adaptation_parameters removes meta-parameters that are fixed in the inner loop." The learner was not read; the representation network (RLN) and prediction network (PLN) are reduced to two linear layers, the inner loop to 2 SGD steps on the PLN, the tasks to made-up regressions. The twin makes both changes
family: meta-gradient
shape: Adam(lr=1e-2) on RLN and PLN, 2 inner steps (lr 0.1) on the PLN's fast weights, 4 tasks per meta-step, 3 meta-steps
numeric: the bug's meta-gradient lacks the terms through the inner steps' gradients
watch: out: each meta-step's gradient comes from one backward pass, applied once and cleared; whether it carries second-order terms is decided by the autograd call
lint: out: whether an autograd.grad call builds a graph is an argument of the call, not where the buffers are cleared and stepped
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
rln = torch.nn.Linear(5, 12)
pln = torch.nn.Linear(12, 1)
model = torch.nn.ModuleDict({"rln": rln, "pln": pln})
_gb.start(model)
meta_optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for meta_step in range(3):
    meta_loss = 0.0
    for task in range(4):
        w = torch.randn(5, 1)
        xs, xq = torch.randn(10, 5), torch.randn(10, 5)
        fast_weights = [pln.weight, pln.bias]
        for inner in range(2):
            pred = F.linear(torch.relu(rln(xs)), fast_weights[0], fast_weights[1])
            loss = F.mse_loss(pred, xs @ w)
            grad = torch.autograd.grad(loss, fast_weights)  # BUG
            # FIX: grad = torch.autograd.grad(loss, fast_weights, create_graph=True)
            fast_weights = [p - 0.1 * g for p, g in zip(fast_weights, grad)]
        meta_loss = meta_loss + F.mse_loss(F.linear(torch.relu(rln(xq)), fast_weights[0], fast_weights[1]), xq @ w)
    meta_optimizer.zero_grad()
    meta_loss.backward()
    meta_optimizer.step()
_gb.done(model)
