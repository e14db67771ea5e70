"""FunASR: DDP's no_sync() skips the synchronisation of the micro-batch that ends the window instead of the others.

source: modelscope/FunASR#3472 (https://github.com/modelscope/FunASR/pull/3472), "fix(train): align DDP no_sync with gradient accumulation": "The old batch_idx % accum_grad condition synchronizes the first microbatch and suppresses synchronization on the optimizer-step microbatch, leaving rank-local accumulated gradients"
family: ddp-no-sync
shape: my_context = model.no_sync if batch_idx % accum_grad != 0 else nullcontext; with my_context(): loss.backward(); the optimizer steps when (batch_idx + 1) % accum_grad == 0. Two gloo ranks on CPU: this process is rank 0, a spawned process is rank 1
numeric: after the all-reduce of the first micro-batch, each rank adds its own later micro-batches unsynchronised: the ranks step with different gradients and their weights drift apart
watch: out: the all-reduce happens inside DDP's reducer; the watch sees one rank's .grad, not whether the ranks agree
lint: out: which micro-batch a no_sync condition selects needs the loop's arithmetic; no rule covers it
bug-step: 1
"""
import contextlib
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _gb

accum_grad = 2


def train(rank, init_file, world_size=2):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(6, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    if rank == 0:
        _gb.start(model.module)
    g = torch.Generator().manual_seed(100 + rank)
    for batch_idx in range(6):
        x, y = torch.randn(4, 6, generator=g), torch.randn(4, 2, generator=g)
        my_context = model.no_sync if batch_idx % accum_grad != 0 else contextlib.nullcontext  # BUG
        # FIX: my_context = model.no_sync if (batch_idx + 1) % accum_grad != 0 else contextlib.nullcontext
        with my_context():
            loss = F.mse_loss(model(x), y) / accum_grad
            loss.backward()
        if (batch_idx + 1) % accum_grad == 0:
            optimizer.step()
            optimizer.zero_grad()
    if rank == 0:
        _gb.done(model.module)
    dist.destroy_process_group()


def rank1(init_file):
    _gb.setup()  # the same dtype as rank 0
    train(1, init_file)


if __name__ == "__main__":
    _gb.setup()
    with tempfile.TemporaryDirectory(prefix="gradbench-ddp-") as folder:
        init_file = os.path.join(folder, "store")
        peer = torch.multiprocessing.get_context("spawn").Process(target=rank1, args=(init_file,))
        peer.start()
        train(0, init_file)
        peer.join()
