"""DeepSpeed: time per optimizer step and collectives per step, the engine's own accumulation vs gg.Accumulator(engine).

Run under torchrun (2 gloo processes on CPU), for ZeRO stages 0-3. For each stage
two engines are built from the same model and config: one trained with DeepSpeed's
own loop (``engine.backward(loss)`` and ``engine.step()`` every micro-batch: a mean
of means), one with ``gg.Accumulator(engine, steps)`` and the micro-batches' item
counts (unequal, so the exact end-of-window multiply runs every window: the
Accumulator's worst case). They run interleaved, one window each per round, so that
machine noise hits both alike; the ratio is the median over rounds of the paired
per-round ratio. Collectives (all-reduce, reduce-scatter, all-gather, broadcast
calls on ``torch.distributed``) are counted over the same windows.

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/bench_deepspeed.py   # the figures in docs/benchmarks.md
    python -m torch.distributed.run --nproc-per-node 2 benchmarks/bench_deepspeed.py --quick

Writes ``benchmarks/out/bench_deepspeed.json`` (rank 0) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import gradguard as gg  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
COLLECTIVES = ("all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "reduce_scatter", "all_gather",
               "all_reduce_coalesced", "broadcast")


def make_model(dim: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(dim, dim), nn.GELU()]
    return nn.Sequential(*blocks, nn.Linear(dim, 1))


def data(rank: int, window: int, micro: int, rows: int, dim: int):
    g = torch.Generator().manual_seed(10_000 * rank + 100 * window + micro)
    x = torch.randn(rows, dim, generator=g)
    y = torch.randn(rows, 1, generator=g)
    count = int(torch.randint(1, rows + 1, (1,), generator=g))  # unequal item counts
    mask = torch.zeros(rows)
    mask[:count] = 1
    return x, y, mask, count


def masked_loss(model, x, y, mask):
    return (((model(x) - y) ** 2).squeeze(1) * mask).sum() / mask.sum()


class Counter:
    """Counts torch.distributed collective calls while active (the engine's and gradguard's alike)."""

    def __init__(self) -> None:
        self.n = 0
        self.originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}

    def __enter__(self):
        for name, fn in self.originals.items():
            setattr(dist, name, self._wrap(fn))
        return self

    def _wrap(self, fn):
        def counted(*args, **kwargs):
            self.n += 1
            return fn(*args, **kwargs)
        return counted

    def __exit__(self, *exc):
        for name, fn in self.originals.items():
            setattr(dist, name, fn)
        return False


def build(stage: int, args):
    import deepspeed

    model = make_model(args.dim, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    config = {
        "train_micro_batch_size_per_gpu": args.rows,
        "gradient_accumulation_steps": args.steps,
        "gradient_clipping": 1.0,  # DeepSpeed's default, on in both
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    return engine


def window_engine(engine, rank, w, args):
    for m in range(args.steps):
        x, y, mask, _ = data(rank, w, m, args.rows, args.dim)
        engine.backward(masked_loss(engine, x, y, mask))
        engine.step()


def window_gradguard(engine, acc, rank, w, args):
    for m in range(args.steps):
        x, y, mask, count = data(rank, w, m, args.rows, args.dim)
        acc.backward(masked_loss(engine, x, y, mask), count=count)
        acc.step()


def timed(fn) -> float:
    dist.barrier()
    start = time.perf_counter()
    fn()
    dist.barrier()
    return time.perf_counter() - start


def bench_stage(stage: int, rank: int, args) -> dict:
    plain = build(stage, args)
    exact = build(stage, args)
    acc = gg.Accumulator(exact, args.steps)
    for w in range(args.warmup):
        window_engine(plain, rank, w, args)
        window_gradguard(exact, acc, rank, w, args)
    per_round, t_plain, t_exact = [], [], []
    for r in range(args.rounds):
        w = args.warmup + r
        # Alternate which goes first, so that neither always follows the other.
        if r % 2 == 0:
            a = timed(lambda: window_engine(plain, rank, w, args))
            b = timed(lambda: window_gradguard(exact, acc, rank, w, args))
        else:
            b = timed(lambda: window_gradguard(exact, acc, rank, w, args))
            a = timed(lambda: window_engine(plain, rank, w, args))
        t_plain.append(a)
        t_exact.append(b)
        per_round.append(b / a)
    # What one extra small collective costs here (gradguard's count, loss and flag: 4 float64 numbers).
    def lone_all_reduces():
        for _ in range(args.rounds):
            dist.all_reduce(torch.zeros(4, dtype=torch.float64))

    lone = [timed(lone_all_reduces) / args.rounds]
    counts = {}
    w = args.warmup + args.rounds
    with Counter() as c:
        window_engine(plain, rank, w, args)
    counts["engine"] = c.n
    with Counter() as c:
        window_gradguard(exact, acc, rank, w, args)
    counts["gradguard"] = c.n
    return {
        "stage": stage,
        "engine_s": statistics.median(t_plain),
        "gradguard_s": statistics.median(t_exact),
        "ratio_median": statistics.median(per_round),
        "ratio_of_medians": statistics.median(t_exact) / statistics.median(t_plain),
        "lone_count_all_reduce_s": statistics.median(lone),
        "collectives_per_window": counts,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stages", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="a smoke run (few rounds, small model)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup, args.dim, args.layers = 4, 1, 64, 2

    import deepspeed

    # DeepSpeed's CPU backend would first compile a shared-memory all-reduce (minutes): use gloo as is.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.utils.logger.setLevel("WARNING")
    torch.set_num_threads(1)
    deepspeed.init_distributed("gloo")
    rank = dist.get_rank()
    results = [bench_stage(stage, rank, args) for stage in args.stages]
    if rank == 0:
        setup = {k: getattr(args, k) for k in ("rounds", "steps", "rows", "dim", "layers")}
        setup["world_size"] = dist.get_world_size()
        OUT.mkdir(exist_ok=True)
        (OUT / "bench_deepspeed.json").write_text(json.dumps({"setup": setup, "results": results}, indent=2))
        print(f"setup: {setup}")
        print("| ZeRO stage | engine's own, ms/window | gg.Accumulator(engine), ms/window | ratio, median of paired rounds "
              "| ratio of medians | one 4-number all-reduce alone, ms | collectives/window, engine -> gradguard |")
        print("|---|---|---|---|---|---|---|")
        for r in results:
            c = r["collectives_per_window"]
            print(f"| {r['stage']} | {1e3 * r['engine_s']:.1f} | {1e3 * r['gradguard_s']:.1f} | {r['ratio_median']:.3f}x "
                  f"| {r['ratio_of_medians']:.3f}x | {1e3 * r['lone_count_all_reduce_s']:.2f} | {c['engine']} -> {c['gradguard']} |")
    dist.barrier()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
