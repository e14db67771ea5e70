"""docs/distributed.md, "Running under torchrun": DDP with the Accumulator, exact over all ranks' data.

Run: torchrun --nproc-per-node 2 examples/ddp_torchrun.py
 or: python examples/ddp_torchrun.py      (starts 2 gloo ranks on CPU itself, about 10 s)
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import gradguard as gg

VOCAB = 11


class MyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.head = torch.nn.Linear(8, VOCAB)

    def forward(self, x):
        return self.head(self.embed(x))


def rank_data(rank):
    """This rank's micro-batches: different sizes on each rank, some targets ignored (-100)."""
    g = torch.Generator().manual_seed(100 + rank)
    out = []
    for rows in ((2, 3, 1, 4) if rank == 0 else (5, 1, 2, 2)):
        inputs = torch.randint(0, VOCAB, (rows, 6), generator=g)
        targets = inputs.roll(-1, dims=1)
        targets[:, -(rank + 1):] = -100
        out.append((inputs, targets))
    return out


def main():
    dist.init_process_group()                     # "nccl" on GPUs, "gloo" on CPU
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)                          # the same initial weights on every rank
    model = DDP(MyModel().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    acc = gg.Accumulator(opt, steps=4, model=model, max_grad_norm=1.0)
    loader = rank_data(rank)
    applied = []  # the gradient each optimizer step applies (after normalising and clipping), for the check
    opt.register_step_pre_hook(lambda *_: applied.append([p.grad.detach().clone() for p in model.parameters()]))

    # --- the doc's loop, as written there ---
    for inputs, targets in loader:                # this rank's shard of the data
        with acc.microbatch():                    # no gradient sync unless this micro-batch ends the window
            logits = model(inputs.to(device))
            loss = F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten(), ignore_index=-100)
            acc.backward(loss, count=(targets != -100).sum())   # this rank's token count
        acc.step()
    acc.flush()                                   # every rank, after its last micro-batch

    # The reference, in this process: plain PyTorch on the full batch of every rank's data, from the
    # same initial weights: its mean loss over all targets, and its gradient clipped to norm 1.0.
    torch.manual_seed(0)
    ref = MyModel().to(device)
    every = [b for r in range(dist.get_world_size()) for b in rank_data(r)]
    logits = torch.cat([ref(i.to(device)).flatten(0, 1) for i, _ in every])
    full_loss = F.cross_entropy(logits, torch.cat([t.flatten() for _, t in every]).to(device), ignore_index=-100)
    full_loss.backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
    (grads,) = applied                            # one window of 4 micro-batches: one step
    error = max((g - p.grad).abs().max().item() for g, p in zip(grads, ref.parameters()))
    scale = max(p.grad.abs().max().item() for p in ref.parameters())
    exact = error <= 1e-5 * scale and abs(acc.loss - full_loss.item()) <= 1e-5 * abs(full_loss.item())
    if rank == 0:
        print(f"window loss {acc.loss:.6f} (acc.loss, the same on every rank); full-batch loss over both ranks' "
              f"targets {full_loss.item():.6f}")
        print(f"gradient applied at the step vs the full batch's: largest difference {error:.1e} of {scale:.3g} "
              f"-> {'exact (float32 rounding)' if exact else 'NOT the full-batch gradient'}")
    if not exact:
        raise SystemExit(f"rank {rank}: the window is not the full batch")
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
    if "RANK" in os.environ:                      # started by torchrun
        main()
    else:                                         # plain `python`: start 2 CPU ranks like torchrun would
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_spawned, args=(2, port), nprocs=2)
        sys.exit(0)
