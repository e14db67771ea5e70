"""Device syncs and step time of the watch and the Accumulator on a launch-bound CUDA step.

A small MLP (many tiny kernels per micro-batch, so the host's launch rate
decides the step time) trains with gradient accumulation in four ways, the
same data and model for each:

* ``plain``: a hand loop, ``(loss / K).backward()`` per micro-batch, then
  ``step()`` and ``zero_grad()``;
* ``watch``: that loop inside ``gradguard.watch(mode="record")``;
* ``accumulator``: ``gradguard.Accumulator(opt, K)``, ``acc.backward(loss, count=n)``
  and ``acc.step()`` per micro-batch;
* ``accumulator+watch``: the Accumulator inside the watch.

Syncs: ``torch.cuda.set_sync_debug_mode("warn")`` makes every operation that
waits for the device emit a warning; they are counted per condition in two
places: inside the micro-batches (forward, backward, and ``acc.step()`` where
it does not end the window) and at the window's end (``opt.step()`` and
``zero_grad()``, or the ``acc.step()`` that steps), printed per micro-batch and
per window, each as the difference to ``plain``. The goals: 0 added per
micro-batch for every condition; at the window's end 0 added by the watch and
1 by the Accumulator (its one read of the window's losses: the non-finite
check and the mean loss). Time: wall clock per optimizer step with the
sync debug mode off, ``torch.cuda.synchronize()`` around each timed block,
conditions interleaved round by round (rotated) so that noise hits all alike;
printed as medians and ratios to ``plain``.

Without CUDA it says so and exits 0 (nothing measured). Example::

    python benchmarks/gpu_sync_check.py --rounds 10 --steps 20 --accum 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

CONDITIONS = ("plain", "watch", "accumulator", "accumulator+watch")


def _model(width: int, depth: int, device) -> nn.Module:
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 1)).to(device)


class Tally:
    """Sync warnings counted per section (``"micro-batch"``, ``"window end"``) from a warnings list."""

    def __init__(self, caught: list):
        self.caught = caught
        self.counts = {"micro-batch": 0, "window end": 0}

    @contextlib.contextmanager
    def section(self, name: str):
        start = len(self.caught)
        try:
            yield
        finally:
            self.counts[name] += sum(1 for w in self.caught[start:] if "synchroniz" in str(w.message).lower())


def _untallied(name: str):
    return contextlib.nullcontext()


def _runner(cond: str, model: nn.Module, opt, accum: int, data):
    """A function running one optimizer step (``accum`` micro-batches) in condition ``cond``;
    ``step(tally)`` counts the syncs of its micro-batches and of its window's end apart."""
    import gradguard as gg

    acc = gg.Accumulator(opt, accum) if cond.startswith("accumulator") else None

    def step(tally=None):
        section = tally.section if tally is not None else _untallied
        if acc is None:
            for x, y in data:
                with section("micro-batch"):
                    (F.mse_loss(model(x), y) / accum).backward()
            with section("window end"):
                opt.step()
                opt.zero_grad(set_to_none=True)
        else:
            for i, (x, y) in enumerate(data):
                last = i == len(data) - 1
                with section("micro-batch"):
                    acc.backward(F.mse_loss(model(x), y), count=len(y))  # a host int: no read of the device
                    if not last:
                        acc.step()
                if last:
                    with section("window end"):
                        acc.step()

    return step


def _context(cond: str):
    if cond.endswith("watch"):
        import gradguard as gg

        return gg.watch(mode="record")
    return contextlib.nullcontext()


def count_syncs(step, cond: str, steps: int) -> dict:
    """Operations that waited for the device while ``steps`` steps ran (sync debug mode "warn"),
    inside the micro-batches and at the windows' ends: ``{"micro-batch": n, "window end": m}``."""
    with _context(cond):
        step()  # untimed: the watch learns the model, lazy optimizer state is made
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tally = Tally(caught)
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for _ in range(steps):
                    step(tally)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    return tally.counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10, help="interleaved timing rounds (default 10)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per condition per round (default 20)")
    parser.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step (default 4)")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_sync_check: CUDA is not available here; nothing measured (run it on a machine with a GPU).")
        return 0
    device = torch.device("cuda")
    torch.manual_seed(0)
    base = _model(args.width, args.depth, device)
    g = torch.Generator(device="cpu").manual_seed(1)
    data = [(torch.randn(args.batch, args.width, generator=g).to(device),
             torch.randn(args.batch, 1, generator=g).to(device)) for _ in range(args.accum)]
    runs = {}
    for cond in CONDITIONS:
        model = _model(args.width, args.depth, device)
        model.load_state_dict(base.state_dict())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        runs[cond] = _runner(cond, model, opt, args.accum, data)

    micro = args.steps * args.accum
    syncs = {c: count_syncs(runs[c], c, args.steps) for c in CONDITIONS}

    times = {c: [] for c in CONDITIONS}
    per_round = {c: [] for c in CONDITIONS}
    for c in CONDITIONS:  # warm-up
        with _context(c):
            for _ in range(3):
                runs[c]()
    torch.cuda.synchronize()
    for r in range(args.rounds):
        k = r % len(CONDITIONS)
        for cond in CONDITIONS[k:] + CONDITIONS[:k]:
            with _context(cond):
                runs[cond]()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    runs[cond]()
                torch.cuda.synchronize()
                dt = (time.perf_counter() - t0) / args.steps
            times[cond].append(dt)
            per_round[cond].append(dt)

    name = torch.cuda.get_device_name(device)
    n_tensors = sum(1 for _ in base.parameters())
    print(f"device: {name}; torch {torch.__version__}; MLP {args.depth} x Linear({args.width}, {args.width}) + head "
          f"({n_tensors} parameter tensors), batch {args.batch}, {args.accum} micro-batches per step, AdamW(foreach)")
    print(f"syncs counted over {micro} micro-batches; time: {args.rounds} interleaved rounds x {args.steps} steps")
    print(f"{'condition':<18} {'syncs/micro-batch':>17} {'added':>7} {'syncs/window end':>16} {'added':>7}"
          f" {'ms/step':>9} {'ratio':>7} {'paired':>7}")
    results = {}
    plain = statistics.median(times["plain"])
    for c in CONDITIONS:
        med = statistics.median(times[c])
        paired = statistics.median(a / b for a, b in zip(per_round[c], per_round["plain"]))
        per_micro = syncs[c]["micro-batch"] / micro
        added = (syncs[c]["micro-batch"] - syncs["plain"]["micro-batch"]) / micro
        per_end = syncs[c]["window end"] / args.steps
        added_end = (syncs[c]["window end"] - syncs["plain"]["window end"]) / args.steps
        print(f"{c:<18} {per_micro:>17.3f} {added:>+7.3f} {per_end:>16.3f} {added_end:>+7.3f}"
              f" {med * 1e3:>9.3f} {med / plain:>7.3f} {paired:>7.3f}")
        results[c] = {"syncs_per_microbatch": per_micro, "added_syncs_per_microbatch": added,
                      "syncs_per_window_end": per_end, "added_syncs_per_window_end": added_end,
                      "ms_per_step": med * 1e3, "ratio": med / plain, "paired_ratio": paired}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "args": vars(args), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
