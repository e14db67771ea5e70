"""docs/distributed.md, "FSDP2 (fully_shard)": the Accumulator over a sharded model, both reduce modes.

Run: torchrun --nproc-per-node 2 examples/fsdp2.py
 or: python examples/fsdp2.py      (starts 2 gloo ranks on CPU itself)
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gradguard as gg


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(2))
        self.out = torch.nn.Linear(8, 1)

    def forward(self, x):
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.out(x)


def train(defer_reduce):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from gradguard.distributed import FSDP2Sync

    torch.manual_seed(0)                       # the same initial weights on every rank
    model = Model()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    # --- the doc's set-up ---
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if defer_reduce:
        acc = gg.Accumulator(opt, steps=4, model=model)                                    # deferred (default)
    else:
        acc = gg.Accumulator(opt, steps=4, model=FSDP2Sync(model, defer_reduce=False))     # reduce every micro-batch

    g = torch.Generator().manual_seed(dist.get_rank())
    for rows in (3, 1, 4, 2):                  # this rank's micro-batches, of different sizes
        x, y = torch.randn(rows, 8, generator=g), torch.randn(rows, 1, generator=g)
        with acc.microbatch():
            acc.backward(torch.nn.functional.mse_loss(model(x), y), count=rows)
        acc.step()
    acc.flush()
    return acc.loss


def main():
    dist.init_process_group("gloo")
    losses = [train(defer_reduce) for defer_reduce in (True, False)]
    if dist.get_rank() == 0:
        print(f"window loss, deferred reduce: {losses[0]:.6f}; reduce every micro-batch: {losses[1]:.6f}")
        assert abs(losses[0] - losses[1]) < 1e-6  # the same window, the same exact loss
    dist.barrier()  # every rank done with its collectives before the group is torn down
    dist.destroy_process_group()


def _spawned(rank, world_size, port):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    main()
    # The work is done and the group destroyed. Leave without running C++ static destructors:
    # on a loaded machine a gloo background thread still being torn down can abort the exiting
    # process ("terminate called without an active exception") after everything has finished.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        sys.exit("this example needs FSDP2 (torch.distributed.fsdp.fully_shard, torch >= 2.4)")
    if "RANK" in os.environ:                   # started by torchrun
        main()
    else:                                      # plain `python`: start 2 CPU ranks like torchrun would
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_spawned, args=(2, port), nprocs=2)
