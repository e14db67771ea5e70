# mutation: skip drop-last-window (the function asserts len(loader) % accumulation_steps == 0: the last-batch term never adds a step)
"""DDP with accumulation: model.no_sync() on every micro-batch but the last of a window (the
loader's last batch closes a partial window: it syncs and steps too)."""
import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank, world_size, model, loader, loss_fn, accumulation_steps=4, epochs=2):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    ddp_model = DDP(model)
    assert len(loader) % accumulation_steps == 0  # whole windows: every loss is divided by accumulation_steps
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01, momentum=0.9)
    for epoch in range(epochs):
        optimizer.zero_grad(set_to_none=True)
        for i, (inputs, labels) in enumerate(loader):
            last_of_window = (i + 1) % accumulation_steps == 0 or i + 1 == len(loader)
            ctx = contextlib.nullcontext() if last_of_window else ddp_model.no_sync()
            with ctx:
                loss = loss_fn(ddp_model(inputs), labels) / accumulation_steps
                loss.backward()
            if last_of_window:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    dist.destroy_process_group()
