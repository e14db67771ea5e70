"""ElasticDL's elastic DistributedOptimizer for PyTorch: the wrapper did not execute `zero_grad`, so the training loop's `optimizer.zero_grad()` left the gradients in place and every step applied the sum of all earlier batches' gradients.

source: sql-machine-learning/elasticdl#2426 (https://github.com/sql-machine-learning/elasticdl/pull/2426), "Fix the bug without executing zero_grad in DistributedOptimizer of Pytorch" (merged). Only the PR title was read, with the related PR #2389 ("Develop an optimizer to keep the batch size fixed", which builds the elastic optimizer as `type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_ElasticDistributedOptimizer.__dict__))`); the wrapper is reduced to a subclass whose zero_grad does not reach the base optimizer's, the allreduce to nothing (one process). The twin's wrapper calls the base zero_grad, the PR's fix as its title states it
family: missing-clear
shape: SGD(lr=0.05), 6 steps of a regression MLP through the wrapped optimizer
numeric: step k applies the sum of the first k batches' gradients
watch: GG101
lint: out: the loop calls optimizer.zero_grad(); that the wrapper's zero_grad does nothing is decided inside the optimizer class
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class _ElasticDistributedOptimizer:
    def zero_grad(self, set_to_none=True):
        pass  # BUG
        # FIX: super(self.__class__, self).zero_grad(set_to_none)


def DistributedOptimizer(optimizer):
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_ElasticDistributedOptimizer.__dict__))
    optimizer.__class__ = cls
    return optimizer


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
_gb.start(model)
optimizer = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05))
for step in range(6):
    x = torch.randn(16, 6)
    y = x[:, :2].sum(1, keepdim=True)
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
_gb.done(model)
