"""Distributed accumulation: time per optimizer step and gradient all-reduces per step.

Two gloo ranks on CPU (spawned here; no torchrun needed), one DDP model, three ways
to accumulate ``steps`` micro-batches per optimizer step:

* sync every micro-batch: plain DDP, ``(loss / steps).backward()`` each time
  (DDP all-reduces on every backward);
* HF Accelerate: ``with accelerator.accumulate(model)`` (``no_sync`` except on the
  window's last micro-batch), if accelerate is installed;
* gradguard: ``Accumulator(opt, steps, model=ddp)`` with ``with acc.microbatch()``
  and token counts (exact weighting, one scalar all-reduce of the count per step).

Gradient all-reduces are counted with a DDP comm hook that wraps the default
all-reduce (one call per gradient bucket per synced backward); gradguard's own
small collectives (count and loss, 3 floats) are counted separately. The methods
run interleaved round by round so machine noise hits them alike.

    python benchmarks/bench_distributed.py            # the figures in docs/benchmarks.md
    python benchmarks/bench_distributed.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import gradguard as gg  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


def make_model(dim: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(dim, dim), nn.GELU()]
    return nn.Sequential(*blocks, nn.Linear(dim, 1))


def data(rank: int, step: int, micro: int, rows: int, dim: int):
    g = torch.Generator().manual_seed(10_000 * rank + 100 * step + micro)
    x = torch.randn(rows, dim, generator=g)
    y = torch.randn(rows, 1, generator=g)
    count = int(torch.randint(1, rows + 1, (1,), generator=g))  # unequal item counts
    mask = torch.zeros(rows)
    mask[:count] = 1
    return x, y, mask, count


def masked_mse(model, x, y, mask):
    return (((model(x) - y) ** 2).squeeze(1) * mask).sum() / mask.sum()


class Counter:
    def __init__(self):
        self.allreduce = 0

    def hook(self, state, bucket):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        self.allreduce += 1
        return default_hooks.allreduce_hook(state, bucket)


def _ddp(model):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model)  # default bucketing, as Accelerate builds it


def build(method: str, steps: int, dim: int, layers: int):
    """(run_window(rank, step_index), counter, extra) for one method."""
    counter = Counter()
    extra = {"small": 0}
    if method == "accelerate":
        from accelerate import Accelerator

        accelerator = Accelerator(gradient_accumulation_steps=steps, cpu=True)
        model = make_model(dim, layers)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model, opt = accelerator.prepare(model, opt)
        model.register_comm_hook(dist.group.WORLD, counter.hook)

        def run(rank, step, rows):
            for m in range(steps):
                x, y, mask, _ = data(rank, step, m, rows, dim)
                with accelerator.accumulate(model):
                    accelerator.backward(masked_mse(model, x, y, mask))
                    opt.step()
                    opt.zero_grad()

        return run, counter, extra

    model = _ddp(make_model(dim, layers))
    model.register_comm_hook(dist.group.WORLD, counter.hook)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if method == "sync every micro-batch":

        def run(rank, step, rows):
            for m in range(steps):
                x, y, mask, _ = data(rank, step, m, rows, dim)
                (masked_mse(model, x, y, mask) / steps).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return run, counter, extra

    acc = gg.Accumulator(opt, steps, model=model)
    reduce_sum = acc._sync.reduce_sum

    def counted_reduce_sum(t):
        extra["small"] += 1
        return reduce_sum(t)

    acc._sync.reduce_sum = counted_reduce_sum  # count gradguard's own scalar collective

    def run(rank, step, rows):
        for m in range(steps):
            x, y, mask, count = data(rank, step, m, rows, dim)
            with acc.microbatch():
                acc.backward(masked_mse(model, x, y, mask), count=count)
            acc.step()

    return run, counter, extra


def worker(rank: int, world: int, port: int, args, methods, result_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    results = {}
    for steps in args.steps:
        built = {name: build(name, steps, args.dim, args.layers) for name in methods}
        times = {name: [] for name in methods}
        for name, (run, _, _) in built.items():  # warm-up window each
            run(rank, 0, args.rows)
        before = {name: (c.allreduce, e["small"]) for name, (_, c, e) in built.items()}
        for r in range(args.rounds):
            order = methods[r % len(methods):] + methods[: r % len(methods)]
            for name in order:
                run = built[name][0]
                dist.barrier()
                t0 = time.perf_counter()
                for s in range(args.windows):
                    run(rank, 1 + r * args.windows + s, args.rows)
                dist.barrier()
                times[name].append((time.perf_counter() - t0) / args.windows)
        n_steps = args.rounds * args.windows
        for name, (_, c, e) in built.items():
            results[f"{name}|{steps}"] = {
                "method": name,
                "steps": steps,
                "ms_per_step": 1000 * statistics.median(times[name]),
                "grad_allreduces_per_step": (c.allreduce - before[name][0]) / n_steps,
                "other_collectives_per_step": (e["small"] - before[name][1]) / n_steps,
            }
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--rows", type=int, default=8, help="rows per micro-batch")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--windows", type=int, default=4, help="optimizer steps per method per round")
    p.add_argument("--steps", type=int, nargs="+", default=[4, 8], help="micro-batches per optimizer step")
    args = p.parse_args(argv)
    if args.quick:
        args.dim, args.layers, args.rounds, args.windows = 64, 2, 2, 2

    methods = ["sync every micro-batch", "gradguard"]
    try:
        import accelerate  # noqa: F401

        methods.insert(1, "accelerate")
    except ImportError:
        print("accelerate is not installed: skipping it", file=sys.stderr)

    OUT.mkdir(exist_ok=True)
    result_path = str(OUT / "bench_distributed.json")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.time()
    mp.spawn(worker, args=(2, port, args, methods, result_path), nprocs=2)
    with open(result_path) as f:
        results = json.load(f)
    params = sum(p.numel() for p in make_model(args.dim, args.layers).parameters())

    print(f"2 gloo ranks on CPU, MLP {args.layers}x{args.dim} ({params / 1e6:.2f} M parameters), "
          f"{args.rows} rows per micro-batch, median of {args.rounds} rounds x {args.windows} steps "
          f"({time.time() - t0:.0f} s)\n")
    head = "| micro-batches | method | ms / optimizer step | gradient all-reduce calls (DDP buckets) / step | other collectives / step |"
    print(head)
    print("|---|---|---|---|---|")
    for r in results.values():
        print(f"| {r['steps']} | {r['method']} | {r['ms_per_step']:.1f} | {r['grad_allreduces_per_step']:g} | "
              f"{r['other_collectives_per_step']:g} |")
    _plot(results, methods, args)
    return 0


def _plot(results, methods, args) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    width = 0.8 / len(methods)
    for i, name in enumerate(methods):
        rows = [r for r in results.values() if r["method"] == name]
        xs = [j + i * width for j in range(len(rows))]
        axes[0].bar(xs, [r["ms_per_step"] for r in rows], width, label=name)
        axes[1].bar(xs, [r["grad_allreduces_per_step"] for r in rows], width, label=name)
    for ax, title in zip(axes, ["time per optimizer step (ms)", "gradient all-reduce calls per step"]):
        ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(args.steps))])
        ax.set_xticklabels([f"{s} micro-batches" for s in args.steps])
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.suptitle("2 gloo ranks on CPU, DDP")
    fig.tight_layout()
    fig.savefig(OUT / "bench_distributed.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
