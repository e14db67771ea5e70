"""Optimizer steps per second: hand-written correct loop vs gradguard.Accumulator vs HF Accelerate.

One process, one model, one data set; the methods are interleaved round by round
so machine noise hits them alike, and the figure reported is the median over
rounds of each method's time relative to the hand-written loop (a ratio, not an
absolute time).

    python benchmarks/bench_accumulate.py                  # full run (a few minutes on 2 CPU cores)
    python benchmarks/bench_accumulate.py --quick          # smoke run
    python benchmarks/bench_accumulate.py --clock cpu      # on a shared, loaded machine

``--only many`` times a model of ``--tensors`` separate parameter tensors (10,000 by default)
with almost no compute, where what costs per parameter tensor shows.

Four workloads, two models:
* transformer, equal counts: a small causal transformer LM, every micro-batch with
  the same number of items; the hand-written loop divides by ``steps`` and gradguard
  skips its normalising pass.
* transformer, token counts: variable-length sequences; the hand-written loop knows
  the window's token total in advance (look-ahead) and weights each loss by
  ``n_i / total``, gradguard does not look ahead and normalises once per window (one
  foreach multiply).
* tiny MLP, equal / unequal counts: ``Linear(16, 16) -> Tanh -> Linear(16, 1)`` on
  micro-batches of 8 (equal) or 2..14 rows (unequal), where compute is almost nothing
  and every microsecond of Python per micro-batch shows.

``--clock cpu`` times each method with the CPU time of this thread
(``time.thread_time``, one intra-op thread) instead of wall time: on a machine
shared with other jobs, time spent descheduled then counts for no method.

``--compare SRC`` adds the Accumulator of another checkout's ``src`` folder as the
method ``gradguard before``, in the same rounds, so that old and new code meet the
same machine noise; both versions are then loaded alike, as copies under other package
names, and the table ends with their paired difference per step and its 95 % interval::

    python benchmarks/bench_accumulate.py --only mlp --clock cpu --compare /tmp/old/src

``--no-accelerate`` leaves HF Accelerate's column out.

``--checks-off`` adds ``gradguard, checks off``: the same Accumulator with its check that
nothing else changed the window's ``.grad`` switched off, in the same rounds: what the
self-check itself costs, beside what the whole Accumulator costs against the hand loop.

``hand-written (A/A)`` is a second, identical hand-written loop on its own copy of the
model, timed like the others: how far it lands from 1.000x is how far two runs of the
same code land apart here (memory placement, machine noise), the resolution of every
other ratio in the same table.

Each workload's table is followed by each method's *own code* (``own_code_time``):
in more interleaved rounds, the wall time of a step spent outside the torch work every
method does alike (the forward pass, autograd's backward pass, the optimizer's step and
``zero_grad``, timed inside the same step and subtracted). The scatter of those passes,
which hides a 1 % difference on a transformer, cancels, and what a method adds in
Python resolves to about a microsecond; for the Accumulator its difference to the
hand-written loop is an upper bound of what it costs (see ``own_code_time``).
"""

from __future__ import annotations

import argparse
import random
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

from _compare import bootstrap_median, load_copy  # noqa: E402

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


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


class ManyTensors(nn.Module):
    """``n`` separate ``Parameter(torch.randn(3))`` and almost no compute: the cost per parameter tensor."""

    def __init__(self, n=10_000):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.params = nn.ParameterList(nn.Parameter(torch.randn(3, generator=g)) for _ in range(n))

    def forward(self, x):
        return torch.stack([(p * p).sum() for p in self.params]).sum() * x


def many_loss_of(model, x, y):
    return model(x)


def make_many_windows(n_windows, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [[(torch.rand((), generator=g), None, 1) for _ in range(steps)] for _ in range(n_windows)]


def make_mlp_windows(n_windows, steps, variable, seed=0):
    g = torch.Generator().manual_seed(seed)
    windows = []
    for _ in range(n_windows):
        rows = [int(torch.randint(2, 15, (), generator=g)) if variable else 8 for _ in range(steps)]
        windows.append([(torch.randn(n, 16, generator=g), torch.randn(n, 1, generator=g), n) for n in rows])
    return windows


def mse_loss_of(model, x, y):
    return F.mse_loss(model(x), y)


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

    def __init__(self, model, opt, steps, variable, loss=loss_of):
        self.model, self.opt, self.steps, self.variable, self.loss = model, opt, steps, variable, loss

    def window(self, mbs):
        total = sum(c for _, _, c in mbs)
        for x, y, c in mbs:
            weight = c / total if self.variable else 1 / self.steps
            (self.loss(self.model, x, y) * weight).backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class WithGradguard:
    package = gg  # under --compare, a copy of it loaded as the other version is (see main)

    def __init__(self, model, opt, steps, variable, loss=loss_of):
        self.model, self.acc, self.loss = model, self.package.Accumulator(opt, steps=steps), loss

    def window(self, mbs):
        for x, y, c in mbs:
            self.acc.backward(self.loss(self.model, x, y), count=c)
            self.acc.step()


class WithGradguardChecksOff(WithGradguard):
    """The same Accumulator with its .grad self-check switched off (what the check costs)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.acc._checks = False


class WithGradguardBefore(WithGradguard):
    """The Accumulator of the checkout given to ``--compare``."""


class WithAccelerate:
    """HF Accelerate's accumulate(): divides each loss by the number of micro-batches."""

    accelerator = None

    def __init__(self, model, opt, steps, variable, loss=loss_of):
        from accelerate import Accelerator

        if WithAccelerate.accelerator is None:  # Accelerate's state is a process-wide singleton
            WithAccelerate.accelerator = Accelerator(gradient_accumulation_steps=steps, cpu=True)
        self.model, self.opt = WithAccelerate.accelerator.prepare(model, opt)
        self.loss = loss

    def window(self, mbs):
        accelerator = WithAccelerate.accelerator
        for x, y, c in mbs:
            with accelerator.accumulate(self.model):
                accelerator.backward(self.loss(self.model, x, y))
                self.opt.step()
                self.opt.zero_grad()


class _SharedWorkClock:
    """Wall time spent inside the calls every method makes alike: the loss's forward pass,
    autograd's backward pass, the optimizer's step and zero_grad."""

    def __init__(self):
        self.inside = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.inside += time.perf_counter() - t0

        return timed


def _shuffled(runners: dict, rng: random.Random) -> list:
    """The methods in a new order (seeded: a rerun repeats it)."""
    order = list(runners.items())
    rng.shuffle(order)
    return order


def own_code_time(runners: dict, windows, rounds: int, repeat: int) -> dict:
    """Seconds per optimizer step each method spends outside the shared torch work (median of interleaved rounds).

    The shared work (forward, backward pass, optimizer step, zero_grad) is timed
    inside each step and subtracted from the same step's time: nested timings of
    the same instants, so the passes that make the whole-step ratios noisy on a
    large model cancel exactly and what a method adds in Python resolves to about a
    microsecond. For the Accumulator the difference to the hand-written loop is an
    upper bound of what it costs directly: its backward pass does no more than the
    hand loop's (the weight seeds the pass where the hand loop multiplies the loss:
    one autograd node fewer, counted as shared here). Accelerate swaps its
    optimizer's step method while stepping, so it is left out of this table.
    """
    clock = _SharedWorkClock()
    engine = torch.autograd.backward
    wrapped = []
    for runner in runners.values():
        opt = runner.acc.optimizer if hasattr(runner, "acc") else runner.opt
        wrapped.append((runner, opt, runner.loss))
        opt.step, opt.zero_grad = clock.wrap(opt.step), clock.wrap(opt.zero_grad)
        runner.loss = clock.wrap(runner.loss)
    torch.autograd.backward = clock.wrap(engine)  # Tensor.backward and the Accumulator both call it
    own = {name: [] for name in runners}
    rng = random.Random(1)
    try:
        for r in range(rounds):
            order = _shuffled(runners, rng)
            mbs = windows[r % len(windows)]
            for name, runner in order:
                clock.inside = 0.0
                t0 = time.perf_counter()
                for _ in range(repeat):
                    runner.window(mbs)
                own[name].append((time.perf_counter() - t0 - clock.inside) / repeat)
    finally:
        torch.autograd.backward = engine
        for runner, opt, loss in wrapped:
            del opt.step, opt.zero_grad  # back to the class's methods
            runner.loss = loss
    return {name: statistics.median(v) for name, v in own.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few rounds, for a smoke test")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: time.perf_counter; cpu: this thread's CPU time (for a shared, loaded machine)")
    parser.add_argument("--only", choices=("all", "transformer", "mlp", "many"), default="all",
                        help="which model's workloads to run ('many': --tensors separate parameter tensors, not in 'all')")
    parser.add_argument("--tensors", type=int, default=10_000, help="parameter tensors of the 'many' workload (default 10000)")
    parser.add_argument("--compare", metavar="SRC", default=None,
                        help="also time the Accumulator of this checkout's src folder (method 'gradguard before')")
    parser.add_argument("--no-accelerate", action="store_true", help="leave HF Accelerate's column out")
    parser.add_argument("--checks-off", action="store_true",
                        help="also time the Accumulator with its .grad self-check switched off ('gradguard, checks off')")
    args = parser.parse_args(argv)
    if args.compare and not (Path(args.compare) / "gradguard" / "__init__.py").is_file():
        parser.error(f"--compare {args.compare}: no gradguard package there; pass the src folder of another checkout")
    if args.tensors < 1:
        parser.error(f"--tensors must be at least 1, got {args.tensors}")
    rounds = args.rounds or (4 if args.quick else 120)
    steps, micro, seq = 4, 4, 64
    torch.manual_seed(0)
    torch.set_num_threads(1 if args.clock == "cpu" else max(1, torch.get_num_threads()))
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter

    methods = {"hand-written": HandWritten, "hand-written (A/A)": HandWritten, "gradguard": WithGradguard}
    if args.compare:
        # Both versions are loaded the same way, as copies under other names: two copies of the
        # same code can land a few microseconds per step apart (where their code and data fall
        # in memory), and the one imported as installed must not be the one favoured by it.
        WithGradguardBefore.package = load_copy(args.compare, "gradguard_before")
        WithGradguard.package = load_copy(Path(gg.__file__).resolve().parents[1], "gradguard_current")
        methods["gradguard before"] = WithGradguardBefore
    if args.checks_off:
        methods["gradguard, checks off"] = WithGradguardChecksOff
    try:
        if args.no_accelerate:
            raise ImportError
        import accelerate  # noqa: F401

        methods["accelerate"] = WithAccelerate
    except ImportError:
        if not args.no_accelerate:
            print("(HF Accelerate not installed: its column is left out)")

    workloads = []
    if args.only in ("all", "transformer"):
        workloads += [("transformer, equal counts", SmallTransformerLM, loss_of, make_windows(8, steps, micro, seq, False), False, 1),
                      ("transformer, token counts", SmallTransformerLM, loss_of, make_windows(8, steps, micro, seq, True), True, 1)]
    if args.only in ("all", "mlp"):
        # A window of the tiny MLP takes well under a millisecond: time 20 per measurement.
        workloads += [("tiny MLP, equal counts", TinyMLP, mse_loss_of, make_mlp_windows(8, steps, False), False, 20),
                      ("tiny MLP, unequal counts", TinyMLP, mse_loss_of, make_mlp_windows(8, steps, True), True, 20)]
    if args.only == "many":
        workloads += [(f"{args.tensors:,} tensors, equal counts", lambda: ManyTensors(args.tensors), many_loss_of,
                       make_many_windows(4, steps), False, 1)]
    results = {}
    for workload, factory, loss, windows, variable, repeat in workloads:
        base = factory()
        runners = {}
        for name, cls in methods.items():
            model = factory()
            model.load_state_dict(base.state_dict())
            runners[name] = cls(model, torch.optim.AdamW(model.parameters(), lr=1e-4), steps, variable, loss)
            for _ in range(repeat):
                runners[name].window(windows[0])  # warm-up, untimed
        times = {m: [] for m in methods}
        rng = random.Random(0)
        # One optimizer step per method per round, methods interleaved (in a new order each round:
        # what runs just before a method, and the caches it leaves, is then nobody's in particular):
        # machine noise lands on all of them alike, and the ratio is taken round by round.
        for r in progress(range(rounds), desc=f"rounds ({workload})"):
            order = _shuffled(runners, rng)
            mbs = windows[r % len(windows)]
            for name, runner in order:
                t0 = clock()
                for _ in range(repeat):
                    runner.window(mbs)
                times[name].append((clock() - t0) / repeat)
        ratios = {m: statistics.median(t / h for t, h in zip(times[m], times["hand-written"])) for m in methods}
        results[workload] = (times, ratios)
        unit = "CPU s/step" if args.clock == "cpu" else "median s/step"
        print(f"\n{workload}: {steps} micro-batches per step, {rounds} interleaved rounds ({args.clock} clock)")
        print(f"  {'method':<20} {unit:>14} {'steps/s':>9} {'time vs hand-written':>21} {'ratio of medians':>17}")
        hand_med = statistics.median(times["hand-written"])
        for m in methods:
            med = statistics.median(times[m])
            print(f"  {m:<20} {med:>14.5f} {1 / med:>9.1f} {ratios[m]:>20.3f}x {med / hand_med:>16.3f}x")
        if "gradguard before" in times:
            diffs = [(t - b) * 1e6 for t, b in zip(times["gradguard"], times["gradguard before"])]
            low, high = bootstrap_median(diffs)
            print(f"  gradguard - gradguard before, per round: {statistics.median(diffs):+.1f} us per step "
                  f"(95 % interval {low:+.1f} to {high:+.1f})")
        own = own_code_time({m: r for m, r in runners.items() if m != "accelerate"}, windows, max(10, rounds // 2), repeat)
        print(f"  outside the shared torch work (forward, backward pass, optimizer step, zero_grad), wall time per step,\n"
              f"  median of {max(10, rounds // 2)} more interleaved rounds; the difference is each method's own cost:")
        for m, t in own.items():
            extra = t - own["hand-written"]
            print(f"  {m:<20} {t * 1e6:>10.1f} us {extra * 1e6:>+10.1f} us = {extra / hand_med * 100:>+7.3f}% of a hand-written step")
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
    ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(workloads))], workloads, rotation=15, fontsize=8)
    ax.set_ylabel("time per optimizer step / hand-written")
    ax.set_title("Accumulation overhead (median of interleaved rounds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "accumulate_overhead.png", dpi=120)
    print(f"wrote {out / 'accumulate_overhead.png'}")


if __name__ == "__main__":
    raise SystemExit(main())
