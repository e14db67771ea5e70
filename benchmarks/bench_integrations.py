"""Cost of the framework integrations, side by side with each framework's own accumulation.

    PYTHONPATH=src python benchmarks/bench_integrations.py [--rounds 5] [--no-ddp]
    PYTHONPATH=src python benchmarks/bench_integrations.py --tiny --rounds 15
    PYTHONPATH=src python benchmarks/bench_integrations.py --tiny --rounds 40 --compare /tmp/old/src
    PYTHONPATH=src python benchmarks/bench_integrations.py --tiny --rounds 40 --log-every-n-steps 10
    PYTHONPATH=src python benchmarks/bench_integrations.py --tiny --instructions --rounds 3 --compare /tmp/old/src
    PYTHONPATH=src python benchmarks/bench_integrations.py --tiny --own-code --rounds 60

1. Lightning: time per optimizer step of ``Trainer(accumulate_grad_batches=4)``
   with ``ExactAccumulation`` vs without, interleaved rounds, median ratio.
2. Accelerate: ``Accumulator(opt, 4, accelerator=acc)`` vs Accelerate's own
   ``accelerator.accumulate()`` loop, interleaved rounds, median ratio.
3. Host reads (``aten._local_scalar_dense``, counted by a TorchDispatchMode)
   per window, with and without gradguard, in both.
4. With 2 CPU processes on gloo: DDP gradient all-reduces (buckets, counted
   by a DDP comm hook) per window and other all-reduces per window.
5. ``--tiny``: only the Lightning step on a tiny MLP, where the step is mostly
   Lightning's own work: stock vs a callback whose hooks do nothing (Lightning's
   cost of one more callback) vs ``ExactAccumulation()`` (which logs the window
   loss) vs ``ExactAccumulation(log_name=None)``. With ``--compare SRC`` (another checkout's
   ``src`` folder), that checkout's ``ExactAccumulation()`` runs in the same rounds too.
   With ``--instructions``, the same fits counted in instructions executed (valgrind's
   callgrind), which a busy machine does not change, instead of timed.
   With ``--own-code``, each window's CPU time outside the torch work every variant does
   alike (forward, backward pass, optimizer update, zero_grad: timed inside the same window
   and subtracted), read against stock in the same round: the callback's own cost, beside the
   whole-window ratio, with a second stock fit as an A/A control and 95 % bootstrap intervals.

A model big enough that the step is not all framework overhead (an MLP of
about 1.1 M parameters, micro-batches of 64 rows).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

K, MICRO, WIDTH, BATCHES = 4, 64, 512, 32


class HostReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.n += 1
        return func(*args, **(kwargs or {}))


def data(rank=0, n=BATCHES):
    g = torch.Generator().manual_seed(rank)
    sizes = [MICRO - (i * 7) % 24 for i in range(n)]  # unequal micro-batches
    return [(torch.randn(s, WIDTH, generator=g), torch.randn(s, 1, generator=g)) for s in sizes]


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 1))


# ------------------------------------------------------------------ Lightning
def lightning_fit(batches, exact, world_size=1, comm_hook=None):
    import lightning.pytorch as L
    from gradguard.integrations.lightning import ExactAccumulation

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model()

        def training_step(self, batch, i):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class CountBuckets(L.Callback):
        # Lightning registers DDP comm hooks on CUDA only; register the counting one here.
        def on_train_start(self, trainer, pl_module):
            trainer.strategy.model.register_comm_hook(None, comm_hook)

    callbacks = [ExactAccumulation(log_name=None)] if exact else []
    if comm_hook is not None:
        callbacks.append(CountBuckets())
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=world_size, strategy="ddp" if world_size > 1 else "auto",
                        accumulate_grad_batches=K, callbacks=callbacks,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, use_distributed_sampler=False)
    loader = torch.utils.data.DataLoader(batches, batch_size=None)
    t = time.perf_counter()
    trainer.fit(Module(), loader)
    return (time.perf_counter() - t) / trainer.global_step, trainer.global_step


# ------------------------------------------------ Lightning, a tiny model
# Where a step is mostly Lightning's own overhead, what the callback adds per micro-batch shows in
# full: the worst case for ExactAccumulation's relative cost.
TINY_VARIANTS = ("stock", "a callback doing nothing", "exact", "exact, log_name=None")
BEFORE = "exact, --compare checkout"
_before_package = None  # the gradguard package of --compare's checkout, loaded under another name
TINY_ALL = TINY_VARIANTS + (BEFORE,)  # every variant, in a fixed order (its index names it in a callgrind dump)


def tiny_batches(n=256):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(s, 16, generator=g), torch.randn(s, 1, generator=g)) for s in (3 + i % 6 for i in range(n))]


def lightning_tiny_fit(batches, variant, log_every_n_steps=50, probe=None, shared=None, extra=()):
    """Seconds per optimizer step of a fit on a 16-32-1 MLP, K=4: the median over the fit's windows (each K
    micro-batches and its step; the Trainer's set-up excluded) of ``(wall, CPU time of this thread)``.
    ``probe``, if given, is called with the window's index at the start of every window and with None at the
    end of the epoch (the instruction counts below zero and dump their counters there).

    ``shared``, a :class:`SharedWork` clock, times the torch work every variant does alike inside the fit (see
    :func:`tiny_own_code`); the result then has two more elements, medians over windows: each window's CPU time
    outside that work (the variant's own code together with Lightning's loop), and its time in the calls where a
    callback acts (``SharedWork.direct``). ``extra``: more callbacks for the fit."""
    import lightning.pytorch as L
    from gradguard.integrations.lightning import ExactAccumulation

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))

        def training_step(self, batch, i):
            if shared is None:
                return F.mse_loss(self.net(batch[0]), batch[1])
            t0 = shared.now()
            try:
                return F.mse_loss(self.net(batch[0]), batch[1])
            finally:
                shared.inside += shared.now() - t0

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-2)

    class Clock(L.Callback):
        # Wall time and this thread's CPU time at the start of every window (all the work runs on this
        # thread: one torch thread, the data loader in the main process). On a machine busy with other
        # jobs the wall clock also counts the time this process waited for a core, the CPU time does not,
        # and the median window is not moved by the few windows another job's burst slowed down.
        def __init__(self):
            self.marks = []

        def on_train_start(self, trainer, pl_module):
            if shared is not None:
                shared.install(trainer)

        def on_train_end(self, trainer, pl_module):
            if shared is not None:
                shared.uninstall()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx % K == 0:
                self.marks.append(self._mark())
                if probe is not None:
                    probe(batch_idx // K)

        def on_train_epoch_end(self, trainer, pl_module):
            self.marks.append(self._mark())
            if probe is not None:
                probe(None)

        @staticmethod
        def _mark():
            cpu = time.thread_time()
            return time.perf_counter(), cpu, 0.0 if shared is None else shared.inside, \
                0.0 if shared is None else shared.direct

    class Nothing(L.Callback):
        # Five per-step hooks, empty: what Lightning's dispatch of one more callback with them costs
        # (ExactAccumulation keeps one of them, on_before_optimizer_step, once per window).
        def on_train_batch_start(self, *args):
            pass

        def on_before_backward(self, *args):
            pass

        def on_after_backward(self, *args):
            pass

        def on_before_optimizer_step(self, *args):
            pass

        def on_train_batch_end(self, *args):
            pass

    clock = Clock()
    callbacks = [clock]
    if variant == "a callback doing nothing":
        callbacks.append(Nothing())
    elif variant == BEFORE:
        callbacks.append(_before_package.integrations.lightning.ExactAccumulation())
    elif variant not in ("stock", AA):
        callbacks.append(ExactAccumulation(log_name=None) if variant.endswith("None") else ExactAccumulation())
    callbacks.extend(extra)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, accumulate_grad_batches=K, callbacks=callbacks,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, log_every_n_steps=log_every_n_steps)
    try:
        trainer.fit(Module(), torch.utils.data.DataLoader(batches, batch_size=None))
    finally:
        if shared is not None:
            shared.uninstall()
    windows = [(b[0] - a[0], b[1] - a[1], (b[1] - a[1]) - (b[2] - a[2]), b[3] - a[3])
               for a, b in zip(clock.marks, clock.marks[1:])]
    assert len(windows) == trainer.global_step == len(batches) // K  # one optimizer step per window
    times = statistics.median(w[0] for w in windows), statistics.median(w[1] for w in windows)
    return times if shared is None else times + tuple(statistics.median(w[i] for w in windows) for i in (2, 3))


def tiny_rounds(rounds, variants=TINY_VARIANTS, log_every_n_steps=50):
    """Per variant and clock (wall, CPU): the median time per step, and the median over rounds of its ratio to
    stock in the same round (the variants run in a new seeded order each round, so none always runs first)."""
    import random

    batches = tiny_batches()
    for v in variants:
        lightning_tiny_fit(batches[:16], v, log_every_n_steps=1)  # warm-up: imports, first calls, first log
    order = random.Random(0)
    times = {v: [] for v in variants}
    for _ in range(rounds):
        for v in order.sample(variants, len(variants)):
            times[v].append(lightning_tiny_fit(batches, v, log_every_n_steps))
    out = {}
    for v, t in times.items():
        out[v] = [(statistics.median(x[c] for x in t), _spread([x[c] / s[c] for x, s in zip(t, times["stock"])]))
                  for c in (0, 1)]
    return out


# ------------------------------------------------ the callback's own code, resolved
# A whole window's CPU time scatters by several per cent from round to round on a shared machine (caches, frequency,
# other jobs), as much as the callback's cost. Most of a window is torch work every variant does alike: the
# module's forward pass and loss, autograd's backward pass, the optimizer's update and zero_grad. Timed inside the
# same window (nested readings of the same clock) and subtracted from it, what is left is Lightning's own loop and
# whatever a variant adds to it: the difference to stock in the same round is the variant's own cost, the way the
# Accumulator's own code is read in benchmarks/bench_accumulate.py. "stock (A/A)", a second stock fit in every
# round, is the control: how far two runs of the same code land apart is the resolution of every other row.
AA = "stock (A/A)"
OWN_VARIANTS = ("stock", AA, "a callback doing nothing", "exact", "exact, log_name=None")


class SharedWork:
    """This thread's CPU time spent inside the torch work every variant of a fit does alike, and in the calls where
    a callback acts.

    ``inside``: the module's ``training_step`` adds its own forward pass and loss (the benchmark's module times
    itself); :meth:`install` wraps ``torch.autograd.backward`` (which ``Tensor.backward`` calls, under every
    variant's weighting) and each optimizer's ``zero_grad`` and ``step``, the step without the closure Lightning
    runs inside it (the micro-batch's training step, backward pass and ``on_before_optimizer_step`` hooks: the
    passes in it are counted by their own wrappers, the rest is Lightning's or a variant's). Everything else in a
    window (Lightning's loop, its hook dispatch, a callback's hooks and routed calls, the window's rescale) is left
    outside.

    ``direct``: the time in the calls through which a callback acts on a fit, less the shared work inside them:
    Lightning's dispatch of every callback hook (all callbacks, the hooks' own work included), the strategy's
    ``training_step`` and the precision plugin's ``backward`` (as installed when the fit starts: a callback that
    routes them through itself is inside). A variant's difference to stock here is what it does in those calls
    and what dispatching it costs; Lightning's loop around them, the same in every variant, is left out.
    """

    def __init__(self, now=time.thread_time):
        self.now = now
        self.inside = 0.0
        self.direct = 0.0
        self._undo: list = []

    def _timed(self, fn):
        def timed(*args, **kwargs):
            t0 = self.now()
            try:
                return fn(*args, **kwargs)
            finally:
                self.inside += self.now() - t0

        return timed

    def _direct(self, fn):
        def timed(*args, **kwargs):
            t0, shared = self.now(), self.inside
            try:
                return fn(*args, **kwargs)
            finally:
                self.direct += (self.now() - t0) - (self.inside - shared)

        return timed

    def _timed_step(self, step):
        def timed(closure=None, **kwargs):
            inner = 0.0

            def timed_closure():
                nonlocal inner
                t = self.now()
                try:
                    return closure()
                finally:
                    inner += self.now() - t

            t0 = self.now()
            try:
                return step(closure=None if closure is None else timed_closure, **kwargs)
            finally:
                self.inside += self.now() - t0 - inner

        return timed

    def install(self, trainer) -> None:
        from lightning.pytorch.trainer import call

        self.uninstall()
        engine = torch.autograd.backward
        torch.autograd.backward = self._timed(engine)
        self._undo.append(lambda: setattr(torch.autograd, "backward", engine))
        for opt in trainer.optimizers:
            opt.step, opt.zero_grad = self._timed_step(opt.step), self._timed(opt.zero_grad)
            self._undo.append(lambda opt=opt: (opt.__dict__.pop("step", None), opt.__dict__.pop("zero_grad", None)))
        hooks = call._call_callback_hooks
        call._call_callback_hooks = self._direct(hooks)
        self._undo.append(lambda: setattr(call, "_call_callback_hooks", hooks))
        for owner, name in ((trainer.strategy, "training_step"), (trainer.strategy.precision_plugin, "backward")):
            mine = owner.__dict__.get(name)  # a callback's routing (an instance attribute), put back as it was
            setattr(owner, name, self._direct(getattr(owner, name)))
            self._undo.append(lambda owner=owner, name=name, mine=mine: setattr(owner, name, mine)
                              if mine is not None else owner.__dict__.pop(name, None))

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()


def tiny_own_code(rounds, variants=OWN_VARIANTS, log_every_n_steps=50):
    """Three readings of the same fits, per variant: the whole window, the window outside the shared torch work
    ("own"), and the time in the calls where a callback acts ("direct", see :class:`SharedWork`). For each, the
    median over rounds of the variant's time per window, and of its per-round ratio (whole window) or difference
    (own, direct) to stock in the same round, with a 95 % bootstrap interval. The variants run in a seeded new
    order each round."""
    import random

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _compare import bootstrap_median

    batches = tiny_batches()
    for v in variants:
        lightning_tiny_fit(batches[:16], v, log_every_n_steps=1, shared=SharedWork())  # warm-up
    order = random.Random(0)
    runs = {v: [] for v in variants}
    for _ in range(rounds):
        for v in order.sample(variants, len(variants)):
            runs[v].append(lightning_tiny_fit(batches, v, log_every_n_steps, shared=SharedWork()))
    stock = runs["stock"]
    out = {}
    for v, t in runs.items():
        ratios = [x[1] / s[1] for x, s in zip(t, stock)]
        out[v] = {"window": statistics.median(x[1] for x in t),
                  "ratio": (statistics.median(ratios), *bootstrap_median(ratios))}
        for name, i in (("own", 2), ("direct", 3)):
            diffs = [x[i] - s[i] for x, s in zip(t, stock)]
            out[v][name] = statistics.median(x[i] for x in t)
            out[v][name + "_diff"] = (statistics.median(diffs), *bootstrap_median(diffs))
    if BEFORE in runs:  # this checkout's callback against --compare's, paired in the same rounds
        before = runs[BEFORE]
        ratios = [x[1] / b[1] for x, b in zip(runs["exact"], before)]
        out["exact / before"] = {"ratio": (statistics.median(ratios), *bootstrap_median(ratios))}
        for name, i in (("own", 2), ("direct", 3)):
            diffs = [x[i] - b[i] for x, b in zip(runs["exact"], before)]
            out["exact / before"][name + "_diff"] = (statistics.median(diffs), *bootstrap_median(diffs))
    return out


def print_own_code(result, rounds, log_every_n_steps) -> None:
    stock_window = result["stock"]["window"]
    print(f"Lightning, tiny model: K={K}, 256 micro-batches of 3..8 rows, MLP 16-32-1, SGD, 1 thread, "
          f"log_every_n_steps={log_every_n_steps}, {rounds} rounds (variants in a seeded new order each round); "
          "CPU time of the fitting thread per window (K micro-batches and the optimizer step), median window of "
          "each fit, then medians over rounds [95 % bootstrap interval]")
    print("  whole window: its ratio to stock's in the same round\n"
          "  own code: the window outside the torch work every variant does alike (forward, backward pass, optimizer "
          "update, zero_grad); minus stock's in the same round\n"
          "  direct: the time in Lightning's callback-hook dispatch, the strategy's training_step and the precision "
          "plugin's backward, less the shared work inside them; minus stock's in the same round\n"
          "  each difference also as a ratio: 1 + difference / stock's whole window")
    print(f"  {'':28s} {'window':>8s} {'whole window ratio':>22s}  {'own code - stock':>24s} {'as a ratio':>22s}  "
          f"{'direct - stock':>24s} {'as a ratio':>22s}")

    def diff(d):
        m, lo, hi = d
        return (f"{m * 1e6:+7.1f} [{lo * 1e6:+6.1f}, {hi * 1e6:+6.1f}] us "
                f"{1 + m / stock_window:6.3f} [{1 + lo / stock_window:.3f}, {1 + hi / stock_window:.3f}]")

    for v, r in result.items():
        m, lo, hi = r["ratio"]
        window = f"{r['window'] * 1e3:5.2f} ms" if "window" in r else " " * 8
        print(f"  {v:28s} {window} {m:6.3f} [{lo:.3f}, {hi:.3f}]  {diff(r['own_diff'])}  {diff(r['direct_diff'])}")
    if "exact / before" in result:
        print("  (exact / before: this checkout's ExactAccumulation() against --compare's in the same rounds: the ratio "
              "of their whole windows, the differences of their own code and direct time)")


# ------------------------------------------------ the same fits, counted in instructions
# CPU time on a machine shared with other jobs moves by a few per cent from round to round (caches, frequency),
# as much as the cost being measured. The number of instructions a fit executes does not depend on the load:
# callgrind (valgrind) counts them for every window from the third to the end of the epoch. Like the timed
# fits, a variant is read by its median window; the mean over the windows is printed beside it, because it
# holds what the median leaves out: the window in which Lightning writes its logs, whose first `log` call of
# a fit costs several windows' worth (Lightning sets up its result collection), once per fit.
FIRST_COUNTED_WINDOW = 2  # the first windows make the cached weights and warm Lightning's own caches


def tiny_instructions(rounds, variants, log_every_n_steps=50, compare=None):
    """Per variant: ``(median, mean)`` instructions per window (over every counted window of ``rounds`` fits),
    and the ratios of each to stock's. Runs this script again under ``valgrind --tool=callgrind``, one process
    for every fit (variants in a seeded new order each round), and reads the counter dumps it leaves in a
    temporary folder: one per window."""
    import shutil
    import subprocess
    import tempfile

    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"--instructions needs {tool} (valgrind's callgrind) on PATH: install valgrind, or time "
                             "the fits without --instructions")
    out = tempfile.mkdtemp(prefix="gg_callgrind_")
    try:
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}/cg.%p",
               sys.executable, os.path.abspath(__file__), "--tiny", "--log-every-n-steps", str(log_every_n_steps),
               "--count-in-callgrind", ",".join(str(TINY_ALL.index(v)) for v in variants), "--rounds", str(rounds)]
        if compare:
            cmd += ["--compare", compare]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the fits under callgrind failed (exit {done.returncode}):\n{done.stdout[-3000:]}")
        counts = {}  # variant index -> {(round, window): instructions}
        for dump in Path(out).glob("cg.*"):
            tag, total = None, None
            with open(dump, errors="replace") as f:
                for line in f:
                    if line.startswith("desc: Trigger:") and "gg-" in line:
                        tag = line.split("gg-", 1)[1].split()[0]
                    elif line.startswith("totals:"):
                        total = int(line.split()[1])
                        break
            if tag is not None and total is not None:
                v, r, w = map(int, tag.split("-"))
                counts.setdefault(v, {})[r, w] = total
    finally:
        shutil.rmtree(out, ignore_errors=True)
    windows = 256 // K - FIRST_COUNTED_WINDOW
    short = [TINY_ALL[i] for i in map(TINY_ALL.index, variants) if len(counts.get(i, ())) != rounds * windows]
    if short:
        raise SystemExit(f"callgrind left too few window counts for {short}: see `valgrind --tool=callgrind` here")
    result = {}
    for v in variants:
        per = list(counts[TINY_ALL.index(v)].values())
        result[v] = statistics.median(per), statistics.fmean(per)
    stock = result["stock"]
    return {v: (median, median / stock[0], mean, mean / stock[1]) for v, (median, mean) in result.items()}


def _count_in_callgrind(rounds, indices, log_every_n_steps):
    """The child run under callgrind: the instructions of every window of every fit, from its third window to its
    epoch's end, each dumped under a tag ``gg-<variant index>-<round>-<window>`` read back by
    :func:`tiny_instructions`. (A dump also zeroes the counters.)"""
    import random
    import subprocess

    pid = str(os.getpid())

    def control(*args):
        return subprocess.run(["callgrind_control", *args, pid], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    batches = tiny_batches()
    variants = [TINY_ALL[i] for i in indices]
    for v in variants:
        lightning_tiny_fit(batches[:16], v, log_every_n_steps=1)  # warm-up, not counted (the first log too)
    deadline = time.monotonic() + 120
    while control("-i", "on").returncode != 0:  # valgrind's command server answers a few seconds after start
        if time.monotonic() > deadline:
            raise SystemExit("callgrind_control found no callgrind process to switch on")
        time.sleep(1)
    order = random.Random(0)
    for r in range(rounds):
        for v in order.sample(variants, len(variants)):
            last = 256 // K  # the epoch's end closes the last window

            def probe(window, v=TINY_ALL.index(v), r=r, last=last):
                window = last if window is None else window
                if window == FIRST_COUNTED_WINDOW:
                    control("-z")
                elif window > FIRST_COUNTED_WINDOW:
                    control("-d", f"gg-{v}-{r}-{window - 1}")

            lightning_tiny_fit(batches, v, log_every_n_steps, probe)
    control("-i", "off")


def _spread(ratios):
    """``(median, lower quartile, upper quartile)`` of the per-round ratios (the quartiles: the median itself when
    there are fewer than 4 rounds)."""
    if len(ratios) < 4:
        m = statistics.median(ratios)
        return m, m, m
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    return q2, q1, q3


def _ratio(spread):
    return f"{spread[0]:.3f} [{spread[1]:.3f}, {spread[2]:.3f}]"


# ----------------------------------------------------------------- Accelerate
def accelerate_run(batches, exact):
    import gradguard as gg
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=1 if exact else K)
    m = model()
    m, opt = accelerator.prepare(m, torch.optim.AdamW(m.parameters(), lr=1e-4))
    steps = 0
    t = time.perf_counter()
    if exact:
        acc = gg.Accumulator(opt, K, model=m, accelerator=accelerator)
        for x, y in batches:
            with acc.microbatch():
                acc.backward(F.mse_loss(m(x), y), count=len(x))
            steps += acc.step()
        steps += acc.flush()
    else:
        for x, y in batches:
            with accelerator.accumulate(m):
                accelerator.backward(F.mse_loss(m(x), y))
                opt.step()
                opt.zero_grad()
                steps += accelerator.sync_gradients
    return (time.perf_counter() - t) / steps, steps


def interleaved(fn, rounds):
    base, ours = [], []
    batches = data()
    for _ in range(rounds):
        b, _ = fn(batches, False)
        o, _ = fn(batches, True)
        base.append(b)
        ours.append(o)
    return statistics.median(base), statistics.median(ours), statistics.median(ours) / statistics.median(base)


def host_reads(fn):
    out = []
    for exact in (False, True):
        with HostReads() as mode:
            _, steps = fn(data(), exact)
        out.append(mode.n / steps)
    return out


# ------------------------------------------------------------------ 2 processes
def _ddp_counts(rank, world_size):
    import torch.distributed as dist

    counts = {}

    def counting_hook(state, bucket):
        counts["buckets"] = counts.get("buckets", 0) + 1
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0] / world_size)

    real_all_reduce = dist.all_reduce

    def all_reduce(*a, **kw):
        counts["other"] = counts.get("other", 0) + 1
        return real_all_reduce(*a, **kw)

    result = {}
    for exact in (False, True):
        counts.clear()
        dist.all_reduce = all_reduce
        try:
            _, steps = lightning_fit(data(rank, 16), exact, world_size, comm_hook=counting_hook)
        finally:
            dist.all_reduce = real_all_reduce
        buckets = counts.get("buckets", 0)  # the hook's own all_reduce calls are in "other" too
        result[("lightning", exact)] = (buckets / steps, (counts.get("other", 0) - buckets) / steps)

    for exact in (False, True):
        from accelerate import Accelerator
        from accelerate.state import GradientState

        import gradguard as gg

        GradientState._reset_state()
        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=1 if exact else K)
        m = model()
        m, opt = accelerator.prepare(m, torch.optim.AdamW(m.parameters(), lr=1e-4))
        m.register_comm_hook(None, counting_hook)
        counts.clear()
        dist.all_reduce = all_reduce
        steps = 0
        try:
            if exact:
                acc = gg.Accumulator(opt, K, model=m, accelerator=accelerator)
                for x, y in data(rank, 16):
                    with acc.microbatch():
                        acc.backward(F.mse_loss(m(x), y), count=len(x))
                    steps += acc.step()
            else:
                for x, y in data(rank, 16):
                    with accelerator.accumulate(m):
                        accelerator.backward(F.mse_loss(m(x), y))
                        opt.step()
                        opt.zero_grad()
                        steps += accelerator.sync_gradients
        finally:
            dist.all_reduce = real_all_reduce
        buckets = counts.get("buckets", 0)
        result[("accelerate", exact)] = (buckets / steps, (counts.get("other", 0) - buckets) / steps)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-ddp", action="store_true", help="skip the 2-process collective counts")
    p.add_argument("--tiny", action="store_true",
                   help="only the Lightning step on a tiny model: stock vs ExactAccumulation (default logging, "
                        "and log_name=None)")
    p.add_argument("--compare", metavar="SRC", default=None,
                   help="with --tiny: also time the ExactAccumulation of another checkout's src folder, same rounds")
    p.add_argument("--log-every-n-steps", type=int, default=50, metavar="N",
                   help="with --tiny: the Trainer's log_every_n_steps (default 50; the fit has 64 steps)")
    p.add_argument("--instructions", action="store_true",
                   help="with --tiny: count the instructions each fit executes (valgrind's callgrind: the same on a "
                        "busy machine) instead of timing it; a few minutes per round")
    p.add_argument("--own-code", action="store_true",
                   help="with --tiny: time the fits' CPU time outside the torch work every variant does alike (the "
                        "variant's own cost, read against stock in the same round), beside the whole windows, with "
                        "a second stock fit as an A/A control and 95 %% bootstrap intervals")
    p.add_argument("--count-in-callgrind", metavar="VARIANTS", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.log_every_n_steps < 1:
        p.error(f"--log-every-n-steps {args.log_every_n_steps}: pass a number of steps >= 1")
    if args.compare and not os.path.isfile(os.path.join(args.compare, "gradguard", "__init__.py")):
        p.error(f"--compare {args.compare}: no gradguard package there; pass the src folder of another checkout")
    if args.compare and not args.tiny:
        p.error("--compare works with --tiny only")
    if args.instructions and not args.tiny:
        p.error("--instructions works with --tiny only")
    if args.own_code and not args.tiny:
        p.error("--own-code works with --tiny only")
    if args.own_code and args.instructions:
        p.error("--own-code times the fits; --instructions counts them instead: pass one of the two")
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: pass a number of rounds >= 1")
    torch.set_num_threads(1)
    if args.tiny:
        import lightning.pytorch  # noqa: F401  (first: its import sets its logger's level, overridden next)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    if args.tiny and (args.compare or args.count_in_callgrind):
        if args.compare:
            global _before_package
            sys.path.insert(0, os.path.dirname(__file__))
            from _compare import load_copy

            _before_package = load_copy(args.compare, "gradguard_before")
            import gradguard_before.integrations.lightning  # noqa: F401  (the submodule, imported by name)
    if args.count_in_callgrind:
        _count_in_callgrind(args.rounds, [int(i) for i in args.count_in_callgrind.split(",")], args.log_every_n_steps)
        return 0
    if args.tiny and args.instructions:
        variants = TINY_VARIANTS + ((BEFORE,) if args.compare else ())
        print(f"Lightning, tiny model: K={K}, 256 micro-batches of 3..8 rows, MLP 16-32-1, SGD, 1 thread, "
              f"log_every_n_steps={args.log_every_n_steps}, {args.rounds} rounds, instructions counted by callgrind "
              f"from window {FIRST_COUNTED_WINDOW + 1} to the epoch's end")
        print(f"  {'':26s} {'median window':>14s} {'ratio':>6s}   {'mean window':>12s} {'ratio':>6s}")
        print("  (instructions per window of K micro-batches and its step, ratio to stock; the mean holds the "
              "logging window)")
        for v, (median, median_ratio, mean, mean_ratio) in tiny_instructions(
                args.rounds, variants, args.log_every_n_steps, args.compare).items():
            print(f"  {v:26s} {median / 1e6:12.3f} M {median_ratio:6.3f}   {mean / 1e6:10.3f} M {mean_ratio:6.3f}")
        return 0
    if args.tiny and args.own_code:
        variants = OWN_VARIANTS + ((BEFORE,) if args.compare else ())
        print_own_code(tiny_own_code(args.rounds, variants, args.log_every_n_steps), args.rounds, args.log_every_n_steps)
        return 0
    if args.tiny:
        print(f"Lightning, tiny model: K={K}, 256 micro-batches of 3..8 rows, MLP 16-32-1, SGD, 1 thread, "
              f"log_every_n_steps={args.log_every_n_steps}, {args.rounds} rounds (variants in a seeded new order each round)")
        print(f"  {'':26s} {'wall':>9s} {'ratio [quartiles]':>23s}   {'CPU':>9s} {'ratio [quartiles]':>23s}")
        print("  (median window of K micro-batches and its step; ratio to stock: median and quartiles of the "
              "per-round ratios)")
        variants = TINY_VARIANTS + ((BEFORE,) if args.compare else ())
        for v, ((wall, wall_ratio), (cpu, cpu_ratio)) in tiny_rounds(args.rounds, variants, args.log_every_n_steps).items():
            print(f"  {v:26s} {wall * 1e3:6.2f} ms {_ratio(wall_ratio):>23s}   {cpu * 1e3:6.2f} ms {_ratio(cpu_ratio):>23s}")
        return 0

    print(f"K={K}, {BATCHES} micro-batches of {MICRO - 23}..{MICRO} rows, MLP {WIDTH}-1024-512-1, 1 thread, median of {args.rounds} interleaved rounds")
    b, o, r = interleaved(lightning_fit, args.rounds)
    print(f"Lightning   step: without {b * 1e3:.1f} ms, with ExactAccumulation {o * 1e3:.1f} ms, ratio {r:.3f}")
    b, o, r = interleaved(accelerate_run, args.rounds)
    print(f"Accelerate  step: accumulate() {b * 1e3:.1f} ms, Accumulator(accelerator=) {o * 1e3:.1f} ms, ratio {r:.3f}")
    for name, fn in (("Lightning", lightning_fit), ("Accelerate", accelerate_run)):
        base, ours = host_reads(fn)
        print(f"{name:11s} host reads per window: framework alone {base:.2f}, with gradguard {ours:.2f}")
    if not args.no_ddp:
        from _integrations import spawn

        res = spawn(_ddp_counts, 2, timeout=600)[0]
        for fw in ("lightning", "accelerate"):
            (gb, ob), (gg_, og) = res[(fw, False)], res[(fw, True)]
            print(f"{fw:11s} 2 processes, per window: gradient bucket all-reduces {gb:.2f} alone vs {gg_:.2f} with "
                  f"gradguard; other all-reduces {ob:.2f} vs {og:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
