"""Distributed autograd (RPC): gradients live in the context, not in .grad; the DistributedOptimizer
steps from the context, so nothing needs clearing."""
import torch
import torch.distributed.autograd as dist_autograd
from torch.distributed.optim import DistributedOptimizer
from torch.distributed.rpc import RRef


def run_trainer(model, data, target, num_steps=10):
    loss_fn = torch.nn.MSELoss()
    param_rrefs = [RRef(p) for p in model.parameters()]
    opt = DistributedOptimizer(torch.optim.SGD, param_rrefs, lr=0.05)
    for step in range(num_steps):
        with dist_autograd.context() as context_id:
            pred = model(data)
            loss = loss_fn(pred, target)
            dist_autograd.backward(context_id, [loss])
            opt.step(context_id)
            print(step, loss.item())
