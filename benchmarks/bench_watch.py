"""Overhead of ``gradguard.watch`` on a small transformer training loop.

Three conditions in one process, interleaved round by round (and rotated within
each round) so that machine noise (other processes, frequency changes) hits all
of them alike:

* ``plain``: the loop as is;
* ``watch``: the same loop inside ``gradguard.watch(mode="record")``;
* ``anomaly``: inside ``torch.autograd.set_detect_anomaly(True)``, the usual
  "debug mode" of autograd, for scale.

Step time is measured as CPU time of the process (``time.process_time``, with one
torch thread), which a busy shared machine disturbs far less than wall-clock time;
the wall-clock figures are printed beside it. Prints the median step time of each
condition, its ratio to ``plain`` (pooled, and the median of per-round paired
ratios), and writes a PNG into ``benchmarks/out/``. Example::

    python benchmarks/bench_watch.py --rounds 15 --steps 10

``--tensors N`` swaps the transformer for a stack of N/2 tiny ``nn.Linear``
layers (N parameter tensors, almost no compute): the worst case for the
watch's per-parameter work. Example::

    python benchmarks/bench_watch.py --tensors 2000 --dim 4 --batch 2 --rounds 10 --steps 10

``--params N`` is the many-tensor case of MoE and adapter-heavy models at its
extreme: N separate ``Parameter(torch.randn(3))``, a ``foreach`` SGD, and a loss
that only sums each parameter's squares. Example::

    python benchmarks/bench_watch.py --params 10000 --rounds 8 --steps 5

``--curve 1000,10000,50000,100000`` measures the ``--params`` case at each size in
one run (plain and watch interleaved round by round at each size; each timed step
starts from a full garbage collection and runs with the collector paused, and what
the watch does to the collector is measured apart: collections per generation, one
full collection's time, the objects it walks) and plots the ratios and the watch's
cost per tensor per step against the number of tensors, into
``benchmarks/out/bench_watch_curve.png``. At each size it also times the watch's
own code from inside (its hooks less the torch calls they wrap, in steps of
their own): a direct figure with no subtraction of two noisy step times, and an
upper bound on what the watch adds (it includes work a plain step does anyway,
such as the first Python access to each new ``.grad``). Example::

    python benchmarks/bench_watch.py --curve 1000,10000,50000,100000 --rounds 6 --steps 3

``--zero-fill`` makes that loop (and ``--params``'s) clear with
``zero_grad(set_to_none=False)``: the buffers stay and are zero-filled in place.

``--compare SRC`` adds a fourth condition, ``before``: the watch of another
checkout's ``src`` folder (copied under another package name), in the same
rounds, so that old and new code meet the same machine noise. Example::

    python benchmarks/bench_watch.py --params 10000 --compare ../main/src
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import operator
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from _compare import bootstrap_median, load_copy

CONDITIONS = ("plain", "watch", "anomaly")


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=4 * dim, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.head(self.encoder(self.emb(idx)))


class Stack(nn.Module):
    """Many parameter tensors, tiny compute: ``layers`` x Linear(dim, dim)."""

    def __init__(self, dim: int, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


_BEFORE = None


def _context(name: str):
    if name == "before":
        return _BEFORE.watch(mode="record")
    if name == "watch":
        import gradguard

        return gradguard.watch(mode="record")
    if name == "anomaly":
        return torch.autograd.set_detect_anomaly(True)
    return contextlib.nullcontext()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per condition per round (default 10)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steadier timings)")
    parser.add_argument("--tensors", type=int, default=0,
                        help="instead of the transformer: a stack of N/2 Linear(dim, dim) layers (N parameter tensors)")
    parser.add_argument("--params", type=int, default=0,
                        help="instead: N separate Parameter(torch.randn(3)) under a foreach SGD, almost no compute")
    parser.add_argument("--curve", default=None, metavar="N,N,...",
                        help="the --params case at each of these sizes, plain and watch only; plots ratio and cost per tensor")
    parser.add_argument("--compare", metavar="SRC", default=None,
                        help="also time the watch of another checkout's src folder (condition 'before')")
    parser.add_argument("--zero-fill", action="store_true",
                        help="with --params / --curve: zero_grad(set_to_none=False), the buffers kept and zero-filled")
    parser.add_argument("--no-anomaly", action="store_true", help="leave out the anomaly-mode condition (it takes long)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"), help="folder for the PNG")
    args = parser.parse_args(argv)
    if args.compare and not (Path(args.compare) / "gradguard" / "__init__.py").is_file():
        parser.error(f"--compare {args.compare}: no gradguard package there; pass the src folder of another checkout")
    sizes = []
    if args.curve:
        try:
            sizes = [int(n) for n in args.curve.split(",")]
        except ValueError:
            sizes = []
        if not sizes or min(sizes) < 1:
            parser.error(f"--curve {args.curve}: give tensor counts of at least 1, separated by commas (e.g. 1000,10000)")
    try:  # the plot's folder, checked before the minutes of timing
        Path(args.out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out}: cannot write a plot there ({exc.strerror}); give a folder")
    global _BEFORE, CONDITIONS
    if args.compare:
        _BEFORE = load_copy(args.compare)
        CONDITIONS = ("plain", "before", "watch", "anomaly")
    if args.no_anomaly:
        CONDITIONS = tuple(c for c in CONDITIONS if c != "anomaly")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if sizes:
        return curve(sizes, args)
    vocab = 256
    opt = None
    if args.params:
        params = [nn.Parameter(torch.randn(3)) for _ in range(args.params)]
        model = nn.ParameterList(params)
        opt = torch.optim.SGD(params, lr=1e-3, foreach=True)
        described = f"{args.params} x Parameter(torch.randn(3)), foreach SGD"

        def loss_fn():
            return torch.stack([(p * p).sum() for p in params]).sum()
    elif args.tensors:
        model = Stack(args.dim, max(1, args.tensors // 2))
        x, y = torch.randn(args.batch, args.dim), torch.randn(args.batch, args.dim)
        described = f"stack of {len(model.layers)} Linear({args.dim}, {args.dim}), batch {args.batch}"

        def loss_fn():
            return F.mse_loss(model(x), y)
    else:
        model = Model(vocab, args.dim, args.layers)
        x = torch.randint(0, vocab, (args.batch, args.seq))
        y = torch.randint(0, vocab, (args.batch, args.seq))
        described = f"{args.layers}-layer TransformerEncoder, dim {args.dim}, batch {args.batch}x{args.seq}"

        def loss_fn():
            return F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt = opt or torch.optim.AdamW(model.parameters(), lr=1e-4)
    n_params = sum(1 for _ in model.parameters())

    def step():
        opt.zero_grad(set_to_none=not args.zero_fill)
        loss = loss_fn()
        loss.backward()
        opt.step()

    for _ in range(5):  # warm-up: allocator, kernels, lazy optimizer state
        step()

    times = {c: [] for c in CONDITIONS}
    per_round = {c: [] for c in CONDITIONS}  # each round's median: paired ratios cancel slow drift
    wall = {c: [] for c in CONDITIONS}
    findings = 0
    # Time spent in CPython's cyclic garbage collector during the timed steps, per condition:
    # with many tensors it is most of the scatter (a full collection walks every tensor).
    gc_time = {c: 0.0 for c in CONDITIONS}
    gc_full = {c: 0 for c in CONDITIONS}
    timing = [None, 0.0]

    def on_gc(phase, info):
        if timing[0] is None:
            return
        if phase == "start":
            timing[1] = time.process_time()
        else:
            gc_time[timing[0]] += time.process_time() - timing[1]
            gc_full[timing[0]] += info["generation"] == 2

    gc.callbacks.append(on_gc)
    for r in range(args.rounds):
        k = r % len(CONDITIONS)
        order = CONDITIONS[k:] + CONDITIONS[:k]
        for cond in order:
            ctx = _context(cond)
            with ctx:
                step()  # untimed: the first step inside a fresh watch learns the model
                # Every condition's timed steps start from the same collector state: what entering a
                # fresh watch allocated each round (a user enters it once per run) is collected here,
                # not by a full collection that would otherwise fall into the watch's timed steps.
                gc.collect()
                this_round = []
                for _ in range(args.steps):
                    timing[0] = cond
                    c0, w0 = time.process_time(), time.perf_counter()
                    step()
                    this_round.append(time.process_time() - c0)
                    timing[0] = None
                    wall[cond].append(time.perf_counter() - w0)
                times[cond].extend(this_round)
                per_round[cond].append(statistics.median(this_round))
            if cond in ("watch", "before"):
                findings += len(ctx.findings)

    gc.callbacks.remove(on_gc)
    med = {c: statistics.median(v) for c, v in times.items()}
    wmed = {c: statistics.median(v) for c, v in wall.items()}
    print(f"model: {described}, "
          f"{n_params} parameter tensors, {type(opt).__name__}; torch {torch.__version__}, {args.threads} thread(s), CPU")
    print(f"{args.rounds} interleaved rounds x {args.steps} steps per condition; findings under watch: {findings}")
    print(f"{'condition':<10} {'CPU ms/step':>12} {'ratio':>7} {'paired':>7} {'wall ms/step':>13} {'ratio':>7}"
          f" {'GC ms/step':>11} {'full GCs':>9}")
    for c in CONDITIONS:
        paired_c = statistics.median(a / b for a, b in zip(per_round[c], per_round["plain"]))
        print(f"{c:<10} {med[c] * 1e3:>12.2f} {med[c] / med['plain']:>7.3f} {paired_c:>7.3f} "
              f"{wmed[c] * 1e3:>13.2f} {wmed[c] / wmed['plain']:>7.3f}"
              f" {gc_time[c] / len(times[c]) * 1e3:>11.2f} {gc_full[c]:>9}")
    overhead = (med["watch"] / med["plain"] - 1) * 100
    paired = statistics.median(w / p for w, p in zip(per_round["watch"], per_round["plain"]))
    anomaly = f"; anomaly mode: {(med['anomaly'] / med['plain'] - 1) * 100:+.0f}%" if "anomaly" in med else ""
    print(f"watch overhead: {overhead:+.1f}% of the median step (paired per-round median ratio: {paired:.3f}){anomaly}")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.boxplot([[t * 1e3 for t in times[c]] for c in CONDITIONS], showfliers=False)
    ax.set_xticks(range(1, len(CONDITIONS) + 1), [f"{c}\n×{med[c] / med['plain']:.3f}" for c in CONDITIONS])
    ax.set_ylabel("CPU time per step (ms)")
    ax.set_title(f"gradguard.watch overhead: {overhead:+.1f}% (median)")
    fig.tight_layout()
    path = out / ("bench_watch.png" if not (args.tensors or args.params) else f"bench_watch_{n_params}_tensors.png")
    fig.savefig(path, dpi=120)
    print(f"wrote {os.path.relpath(path)}")
    return 0


@contextlib.contextmanager
def _collector_paused():
    """A full collection, then the collector paused for the block (``timeit``'s convention for a timed step)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _interleaved(step, conditions, rounds: int, steps: int):
    """Per condition: all timed steps (CPU s) and each round's median; conditions rotated round by round.

    Every timed step starts from a full collection and runs with the collector
    paused (``timeit``'s convention). With tens of thousands of tensors one
    full collection takes a tenth of a second, and whether it lands in a timed step
    decides that step's time more than anything the watch does; its cost is measured
    apart (see ``_collector_cost``).
    """
    times = {c: [] for c in conditions}
    per_round = {c: [] for c in conditions}
    for r in range(rounds):
        k = r % len(conditions)
        for cond in conditions[k:] + conditions[:k]:
            with _context(cond):
                step()  # untimed: the first step inside a fresh watch learns the model
                this_round = []
                for _ in range(steps):
                    with _collector_paused():
                        c0 = time.process_time()
                        step()
                        this_round.append(time.process_time() - c0)
            times[cond].extend(this_round)
            per_round[cond].append(statistics.median(this_round))
    return times, per_round


def _collector_cost(step, conditions, rounds: int):
    """Per condition, with the collector on: collections per step by generation, CPU s of one full
    collection (median), and the objects the collector tracks between steps.

    What the watch holds between steps is walked by every full collection, and
    what it allocates can bring collections forward: both show here. A full
    collection walks every tracked object of the process (most of them torch's
    own), so the tracked-object count is the exact figure and the timing its cost.
    """
    counts = {c: [0, 0, 0] for c in conditions}
    full = {c: [] for c in conditions}
    tracked = {c: 0 for c in conditions}
    steps = {c: 0 for c in conditions}
    current = [None]

    def on_gc(phase, info):
        if phase == "stop" and current[0] is not None:
            counts[current[0]][info["generation"]] += 1

    gc.callbacks.append(on_gc)
    try:
        for r in range(rounds):
            k = r % len(conditions)
            for cond in conditions[k:] + conditions[:k]:
                with _context(cond):
                    step()
                    gc.collect()
                    current[0] = cond
                    step()
                    current[0] = None
                    steps[cond] += 1
                    c0 = time.process_time()
                    gc.collect()
                    full[cond].append(time.process_time() - c0)
                    tracked[cond] = len(gc.get_objects())
    finally:
        gc.callbacks.remove(on_gc)
    return ({c: [n / steps[c] for n in counts[c]] for c in conditions},
            {c: statistics.median(v) for c, v in full.items()}, tracked)


def _own_time(step, steps: int, condition: str = "watch") -> float:
    """CPU s per step that the watch's own code takes, timed directly inside one watch.

    Each of the watch's entry points is timed: ``backward`` and ``zero_grad``
    less the torch call they wrap, the step's pre and post hooks whole. This
    measures the watch alone, with no subtraction of two noisy step times (what
    it leaves out: the few hundred nanoseconds per event of the clock reads and
    the hooks' own dispatch, which do not depend on the number of tensors).
    Each step starts from a full collection, with the collector paused.
    """
    if condition == "before":
        _session = importlib.import_module(_BEFORE.__name__ + ".watcher._session")
    else:
        from gradguard.watcher import _session

    spent = [0.0]
    clock = time.process_time

    def wrapping_torch(name):
        method = getattr(_session.Session, name)

        def timed(self, orig, *args):
            inner = [0.0]

            def timed_orig(*a, **k):
                c0 = clock()
                try:
                    return orig(*a, **k)
                finally:
                    inner[0] += clock() - c0

            c0 = clock()
            try:
                return method(self, timed_orig, *args)
            finally:
                spent[0] += clock() - c0 - inner[0]

        return method, timed

    def whole(name):
        method = getattr(_session.Session, name)

        def timed(self, *args):
            c0 = clock()
            try:
                return method(self, *args)
            finally:
                spent[0] += clock() - c0

        return method, timed

    patched = {name: wrapping_torch(name) for name in ("backward", "zero_grad")}
    patched.update({name: whole(name) for name in ("step_pre", "step_post")})
    for name, (_, timed) in patched.items():
        setattr(_session.Session, name, timed)
    try:
        with _context(condition):
            step()  # untimed: the first step inside a fresh watch learns the model
            per_step = []
            for _ in range(steps):
                with _collector_paused():
                    spent[0] = 0.0
                    step()
                    per_step.append(spent[0])
    finally:
        for name, (method, _) in patched.items():
            setattr(_session.Session, name, method)
    return statistics.median(per_step)


def _read_time(step, params, steps: int) -> float:
    """CPU s of one read of the ``.grad`` list (``[p.grad for p in params]``) right after the backward pass, no
    watch: the least that any check of every parameter's gradient does once, and the unit of the watch's
    cost per tensor. Its cost per tensor moves with the memory the tensors occupy (cache misses), for the
    optimizer's reads as for the watch's."""
    spent = []
    grad = operator.attrgetter("grad")

    def probe():
        c0 = time.process_time()
        list(map(grad, params))
        spent.append(time.process_time() - c0)

    for _ in range(steps):
        with _collector_paused():
            step(probe)
    return statistics.median(spent)


def curve(sizes, args) -> int:
    """The many-tensor case at several sizes: ratio to plain and the watch's cost per tensor per step."""
    rows = []
    for n in sizes:
        torch.manual_seed(0)
        params = [nn.Parameter(torch.randn(3)) for _ in range(n)]
        opt = torch.optim.SGD(params, lr=1e-3, foreach=True)

        def step(probe=None):
            opt.zero_grad(set_to_none=not args.zero_fill)
            torch.stack([(p * p).sum() for p in params]).sum().backward()
            if probe is not None:
                probe()
            opt.step()

        for _ in range(3):
            step()
        times, per_round = _interleaved(step, ("plain", "watch"), args.rounds, args.steps)
        plain, watched = statistics.median(times["plain"]), statistics.median(times["watch"])
        ratios = [w / p for w, p in zip(per_round["watch"], per_round["plain"])]
        paired = statistics.median(ratios)
        low, high = bootstrap_median(ratios)
        # The watch's cost per tensor from each round's own difference (paired, as the ratio is): a machine
        # that slows down during the run moves both conditions of a round alike, not the difference.
        per_tensor = statistics.median(w - p for w, p in zip(per_round["watch"], per_round["plain"])) / n * 1e6
        collections, full, tracked = _collector_cost(step, ("plain", "watch"), max(2, args.rounds // 2))
        own = _own_time(step, max(3, args.rounds))
        read = _read_time(step, params, max(3, args.rounds))
        rows.append((n, plain, watched, watched / plain, paired, per_tensor, full["plain"], full["watch"], low, high,
                     own / n * 1e6, own / plain, read / n * 1e6))
        print(f"{n:>7} tensors: plain {plain * 1e3:9.2f} CPU ms/step, watch {watched * 1e3:9.2f}, "
              f"ratio {watched / plain:.3f}, paired {paired:.3f} (95% interval {low:.3f}-{high:.3f}), "
              f"watch cost {per_tensor:+.3f} us per tensor per step (paired)", flush=True)
        print(f"{'':>16}the watch's own code, timed inside it: {own * 1e3:.2f} CPU ms/step = {own / n * 1e6:.3f} us "
              f"per tensor per step = {own / plain * 100:.2f} % of the plain step = {own / read:.2f} reads of the "
              f".grad list (one read right after the backward pass, no watch: {read / n * 1e9:.0f} ns per tensor)", flush=True)
        if _BEFORE is not None:
            before = _own_time(step, max(3, args.rounds), "before")
            print(f"{'':>16}--compare: the other checkout's watch, timed the same way: {before * 1e3:.2f} CPU ms/step = "
                  f"{before / n * 1e6:.3f} us per tensor per step ({own / before:.3f}x of it)", flush=True)
        print(f"{'':>16}collector: collections per step by generation plain "
              f"{'/'.join(f'{x:.1f}' for x in collections['plain'])}, watch {'/'.join(f'{x:.1f}' for x in collections['watch'])}; "
              f"one full collection plain {full['plain'] * 1e3:.1f} ms, watch {full['watch'] * 1e3:.1f} ms "
              f"(ratio {full['watch'] / full['plain']:.3f}); objects it walks: {tracked['watch'] - tracked['plain']:+,} under the watch "
              f"({tracked['plain']:,} in all)", flush=True)
        del params, opt
        gc.collect()
    print(f"N x Parameter(torch.randn(3)), foreach SGD, zero_grad(set_to_none={not args.zero_fill}); torch {torch.__version__}, {args.threads} thread(s), CPU; "
          f"{args.rounds} interleaved rounds x {args.steps} steps per condition and size, each timed step "
          "from a full collection with the collector paused; collector cost in its own rounds")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ns = [r[0] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.plot(ns, [r[3] for r in rows], "o-", label="step, watch / plain (median; collector paused)")
    left.errorbar(ns, [r[4] for r in rows], yerr=[[r[4] - r[8] for r in rows], [r[9] - r[4] for r in rows]], fmt="s--",
                  capsize=3, label="step, watch / plain (paired per round, 95% interval)")
    left.plot(ns, [r[7] / r[6] for r in rows], "^:", label="one full garbage collection, watch / plain")
    left.axhline(1.05, color="gray", linestyle=":", label="goal 1.05x")
    left.axhline(1.0, color="black", linewidth=0.6)
    left.set_xscale("log")
    left.set_xlabel("parameter tensors (count, log scale)")
    left.set_ylabel("CPU time ratio (watch / plain)")
    left.legend(fontsize=7)
    right.plot(ns, [r[5] for r in rows], "o-", color="C2", label="watch cost per tensor (median of per-round differences)")
    right.plot(ns, [r[10] for r in rows], "s-", color="C3", label="the watch's own code per tensor (timed inside it)")
    right.plot(ns, [r[12] for r in rows], "^:", color="C7", label="one read of the .grad list per tensor, no watch")
    right.axhline(0.0, color="black", linewidth=0.6)
    right.set_xscale("log")
    right.set_xlabel("parameter tensors (count, log scale)")
    right.set_ylabel("extra CPU time per tensor per step (µs)")
    right.legend(fontsize=7)
    fig.suptitle("gradguard.watch on N x Parameter(randn(3)), foreach SGD (CPU time, 1 thread; timed steps with the garbage collector paused)", fontsize=9)
    fig.tight_layout()
    path = out / "bench_watch_curve.png"
    fig.savefig(path, dpi=120)
    print(f"wrote {os.path.relpath(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
