"""Optimizer steps per second: hand-written correct loop vs gradguard.Accumulator vs HF Accelerate.

One process, one model, one data set; the methods are interleaved round by round
so machine noise hits them alike, and the figure reported is the median over
rounds of each method's time relative to the hand-written loop (a ratio, not an
absolute time).

    python benchmarks/bench_accumulate.py            # full run (a few minutes on 2 CPU cores)
    python benchmarks/bench_accumulate.py --quick    # smoke run

Two workloads:
* equal counts: every micro-batch has the same number of items; the hand-written
  loop divides by ``steps`` and gradguard skips its normalising pass.
* token counts: variable-length sequences; the hand-written loop knows the window's
  token total in advance (look-ahead) and weights each loss by ``n_i / total``,
  gradguard does not look ahead and normalises once per window (one foreach multiply).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import gradguard as gg  # noqa: E402
from gradguard._progress import progress  # noqa: E402

IGNORE = -100


class SmallTransformerLM(nn.Module):
    def __init__(self, vocab=512, dim=128, layers=2, heads=4, max_len=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, x):
        t = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        return self.head(self.blocks(self.tok(x) + self.pos(torch.arange(t)), mask=mask, is_causal=True))


def make_windows(n_windows, steps, micro, seq, variable, seed=0):
    g = torch.Generator().manual_seed(seed)
    windows = []
    for _ in range(n_windows):
        mbs = []
        for _ in range(steps):
            x = torch.randint(0, 512, (micro, seq), generator=g)
            y = torch.randint(0, 512, (micro, seq), generator=g)
            if variable:
                lengths = torch.randint(4, seq + 1, (micro,), generator=g)
                y[torch.arange(seq)[None, :] >= lengths[:, None]] = IGNORE
            mbs.append((x, y, int((y != IGNORE).sum())))
        windows.append(mbs)
    return windows


def loss_of(model, x, y):
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE)


class HandWritten:
    """The correct loop a careful user writes: weights known in advance (look-ahead)."""

    def __init__(self, model, opt, steps, variable):
        self.model, self.opt, self.steps, self.variable = model, opt, steps, variable

    def window(self, mbs):
        total = sum(c for _, _, c in mbs)
        for x, y, c in mbs:
            weight = c / total if self.variable else 1 / self.steps
            (loss_of(self.model, x, y) * weight).backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class WithGradguard:
    def __init__(self, model, opt, steps, variable):
        self.model, self.acc = model, gg.Accumulator(opt, steps=steps)

    def window(self, mbs):
        for x, y, c in mbs:
            self.acc.backward(loss_of(self.model, x, y), count=c)
            self.acc.step()


class WithAccelerate:
    """HF Accelerate's accumulate(): divides each loss by the number of micro-batches."""

    accelerator = None

    def __init__(self, model, opt, steps, variable):
        from accelerate import Accelerator

        if WithAccelerate.accelerator is None:  # Accelerate's state is a process-wide singleton
            WithAccelerate.accelerator = Accelerator(gradient_accumulation_steps=steps, cpu=True)
        self.model, self.opt = WithAccelerate.accelerator.prepare(model, opt)

    def window(self, mbs):
        accelerator = WithAccelerate.accelerator
        for x, y, c in mbs:
            with accelerator.accumulate(self.model):
                accelerator.backward(loss_of(self.model, x, y))
                self.opt.step()
                self.opt.zero_grad()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few rounds, for a smoke test")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    args = parser.parse_args(argv)
    rounds = args.rounds or (4 if args.quick else 120)
    steps, micro, seq = 4, 4, 64
    torch.manual_seed(0)
    torch.set_num_threads(max(1, torch.get_num_threads()))

    methods = {"hand-written": HandWritten, "gradguard": WithGradguard}
    try:
        import accelerate  # noqa: F401

        methods["accelerate"] = WithAccelerate
    except ImportError:
        print("(HF Accelerate not installed: its column is left out)")

    results = {}
    for workload, variable in (("equal counts", False), ("token counts", True)):
        windows = make_windows(8, steps, micro, seq, variable)
        base = SmallTransformerLM()
        runners = {}
        for name, cls in methods.items():
            model = SmallTransformerLM()
            model.load_state_dict(base.state_dict())
            runners[name] = cls(model, torch.optim.AdamW(model.parameters(), lr=1e-4), steps, variable)
            runners[name].window(windows[0])  # warm-up, untimed
        times = {m: [] for m in methods}
        # One optimizer step per method per round, methods interleaved (order alternating):
        # machine noise lands on all of them alike, and the ratio is taken round by round.
        for r in progress(range(rounds), desc=f"rounds ({workload})"):
            order = list(runners.items())
            if r % 2:
                order.reverse()
            mbs = windows[r % len(windows)]
            for name, runner in order:
                t0 = time.perf_counter()
                runner.window(mbs)
                times[name].append(time.perf_counter() - t0)
        ratios = {m: statistics.median(t / h for t, h in zip(times[m], times["hand-written"])) for m in methods}
        results[workload] = (times, ratios)
        print(f"\n{workload}: {steps} micro-batches of {micro}x{seq} tokens per step, {rounds} interleaved rounds")
        print(f"  {'method':<14} {'median s/step':>14} {'steps/s':>9} {'time vs hand-written':>21}")
        for m in methods:
            med = statistics.median(times[m])
            print(f"  {m:<14} {med:>14.4f} {1 / med:>9.2f} {ratios[m]:>20.3f}x")
    _plot(Path(args.out), results)
    return 0


def _plot(out: Path, results):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    workloads = list(results)
    methods = list(results[workloads[0]][1])
    width = 0.8 / len(methods)
    for i, m in enumerate(methods):
        ax.bar([j + i * width for j in range(len(workloads))], [results[w][1][m] for w in workloads], width, label=m)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(workloads))], workloads)
    ax.set_ylabel("time per optimizer step / hand-written")
    ax.set_title("Accumulation overhead (median of interleaved rounds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "accumulate_overhead.png", dpi=120)
    print(f"wrote {out / 'accumulate_overhead.png'}")


if __name__ == "__main__":
    raise SystemExit(main())
