"""``gradguard demo``: the main job on an embedded default.

1. The seed semantics: ``backward()`` adds into ``.grad``.
2. Exactness: the gradient of each accumulation scheme against the full batch
   (float64), then a small causal LM trained four ways with loss curves.
3. The run-time watch on a bundled buggy loop.
4. The linter on the same loop's source.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

from .._progress import progress
from .model import IGNORE_INDEX, TinyCausalLM, lm_loss, make_sequences, split, token_count

SCHEMES = ("full batch", "divide-by-N", "divide-by-N, last window /N", "gradguard")
MICRO = 8  # sequences per micro-batch
ACCUM = 4  # micro-batches per optimizer step (a full batch is 32 sequences)
N_TRAIN = 5 * MICRO * ACCUM + 2 * MICRO  # 5 full windows and a partial one of 2 micro-batches per epoch
DEFAULT_STEPS = 300


def run_demo(out_dir: str = "gradguard-demo", steps: Optional[int] = None) -> int:
    """Run the whole demo, print its findings and write its plots into ``out_dir``. Returns 0."""
    start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    _heading("1. backward() adds into .grad")
    _semantics()

    _heading("2. Exact accumulation against the full batch")
    sweep = _gradient_error_sweep()
    windows = _window_errors()
    curves, final = _train_four_ways(steps or DEFAULT_STEPS)
    _print_training(windows, curves, final)
    plots = _plot(out, sweep, curves)

    # Parts 3 and 4 print their own headings.
    print()
    watch_summary = _run_part("watch_part", out)
    print()
    lint_summary = _run_part("lint_part", out)

    print(f"\nThe watch found {watch_summary['findings']} findings ({', '.join(watch_summary['codes'])}) at run time; "
          f"the linter found {lint_summary['findings']} ({', '.join(lint_summary['codes'])}) before anything ran.")
    for path in plots:
        print(f"wrote {path}")
    print(f"demo finished in {time.perf_counter() - start:.1f} s")
    return 0


def _heading(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 70 - len(text)))


def _semantics() -> None:
    from ..semantics import grads_per_step

    x = torch.ones(3, requires_grad=True)
    print("x = torch.ones(3, requires_grad=True); (x * 2).sum().backward(), three times:")
    print(f"  not cleared:            {grads_per_step(x, 3, clear=False)}")
    print(f"  x.grad = None each time: {grads_per_step(x, 3, clear=True)}")
    print("Each backward adds its gradient to what .grad already holds; clearing is the loop's job.")


# ---------------------------------------------------------------- exactness
def _relative_error(got: List[torch.Tensor], want: List[torch.Tensor]) -> float:
    num = torch.sqrt(sum(((g - w) ** 2).sum() for g, w in zip(got, want)))
    den = torch.sqrt(sum((w**2).sum() for w in want))
    return float(num / den)


def _grads(model) -> List[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def _full_grad(model, batch) -> List[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    lm_loss(model, batch).backward()
    return _grads(model)


def _scheme_grad(model, micro_batches, scheme: str, n_per_window: int) -> List[torch.Tensor]:
    """The gradient one accumulation window of ``micro_batches`` leaves for the optimizer."""
    from ..accumulate import Accumulator
    from ..semantics import _CaptureGrads

    model.zero_grad(set_to_none=True)
    if scheme == "gradguard":
        capture = _CaptureGrads(list(model.parameters()))
        acc = Accumulator(capture, steps=n_per_window)
        for mb in micro_batches:
            acc.backward(lm_loss(model, mb), count=token_count(mb))
            acc.step()
        acc.flush()
        return capture.grads
    # Frameworks divide each mean by N; a partial window is divided by its own size
    # ("divide-by-N") or still by N ("last window /N", as Accelerate/Lightning/DeepSpeed do).
    divisor = n_per_window if scheme == "divide-by-N, last window /N" else len(micro_batches)
    for mb in micro_batches:
        (lm_loss(model, mb) / divisor).backward()
    return _grads(model)


def _gradient_error_sweep() -> Dict[str, Dict[int, float]]:
    """Relative gradient error vs the float64 full batch of 32 sequences, by number of micro-batches."""
    model = TinyCausalLM().double()
    batch = make_sequences(32, seed=1)
    full = _full_grad(model, batch)
    splits = (2, 4, 8, 16, 32)
    errors: Dict[str, Dict[int, float]] = {"divide-by-N": {}, "gradguard": {}}
    print("Relative error of the accumulated gradient, 32 variable-length sequences, float64:")
    print(f"  {'micro-batches N':>16} {'divide-by-N':>14} {'gradguard':>12}")
    for n in progress(splits, desc="gradient error sweep"):
        mbs = split(batch, 32 // n)
        for scheme in errors:
            errors[scheme][n] = _relative_error(_scheme_grad(model, mbs, scheme, n), full)
    for n in splits:
        print(f"  {n:>16} {errors['divide-by-N'][n]:>14.2e} {errors['gradguard'][n]:>12.2e}")
    return errors


def _window_errors() -> Dict[str, Dict[str, float]]:
    """Each scheme's gradient error on a full window and on the epoch's partial final window."""
    model = TinyCausalLM().double()
    data = make_sequences(N_TRAIN, seed=2)
    full_window = (data[0][: MICRO * ACCUM], data[1][: MICRO * ACCUM])
    partial = (data[0][-2 * MICRO :], data[1][-2 * MICRO :])
    out: Dict[str, Dict[str, float]] = {}
    for scheme in SCHEMES[1:]:
        out[scheme] = {
            "full window": _relative_error(_scheme_grad(model, split(full_window, MICRO), scheme, ACCUM), _full_grad(model, full_window)),
            "partial window": _relative_error(_scheme_grad(model, split(partial, MICRO), scheme, ACCUM), _full_grad(model, partial)),
        }
    out[SCHEMES[0]] = {"full window": 0.0, "partial window": 0.0}
    return out


def _train_four_ways(steps: int):
    """Train from one initialisation on one data order, four ways; returns loss curves and final losses."""
    data = make_sequences(N_TRAIN, seed=2)
    windows_per_epoch = -(-N_TRAIN // (MICRO * ACCUM))
    epochs = max(1, -(-steps // windows_per_epoch))
    init = TinyCausalLM().state_dict()
    curves: Dict[str, List[float]] = {}
    final: Dict[str, float] = {}
    for scheme in SCHEMES:
        torch.manual_seed(0)
        model = TinyCausalLM()
        model.load_state_dict(init)
        opt = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
        curve: List[float] = []
        for _ in progress(range(epochs), desc=f"training: {scheme}"):
            _train_epoch(model, opt, data, scheme, curve)
        curves[scheme] = curve
        with torch.no_grad():
            final[scheme] = float(lm_loss(model, data))  # token-mean loss over the whole training set
    return curves, final


def _train_epoch(model, opt, data, scheme: str, curve: List[float]) -> None:
    from ..accumulate import Accumulator

    window = MICRO * ACCUM
    if scheme == "gradguard":
        acc = Accumulator(opt, steps=ACCUM)
        for mb in split(data, MICRO):
            acc.backward(lm_loss(model, mb), count=token_count(mb))
            if acc.step():
                curve.append(acc.loss)
        if acc.flush():
            curve.append(acc.loss)
        return
    for start in range(0, data[0].shape[0], window):
        batch = (data[0][start : start + window], data[1][start : start + window])
        opt.zero_grad(set_to_none=True)
        if scheme == "full batch":
            loss = lm_loss(model, batch)
            loss.backward()
        else:
            mbs = split(batch, MICRO)
            divisor = ACCUM if scheme == "divide-by-N, last window /N" else len(mbs)
            for mb in mbs:
                (lm_loss(model, mb) / divisor).backward()
            with torch.no_grad():
                loss = lm_loss(model, batch)  # the true window loss, for a comparable curve
        opt.step()
        curve.append(float(loss.detach()))


def _print_training(windows, curves, final) -> None:
    print(f"\nA tiny causal LM (token-mean cross-entropy, ignore_index={IGNORE_INDEX}) trained four ways,")
    print(f"{MICRO} sequences per micro-batch, {ACCUM} per step, a partial final window each epoch:")
    print(f"  {'scheme':<30} {'grad error (full window)':>25} {'(partial window)':>17} {'final loss':>11} {'curve gap, 1st 100 steps':>25}")
    for scheme in SCHEMES:
        w = windows[scheme]
        gap = _curve_gap(curves[scheme], curves[SCHEMES[0]], 100)
        print(f"  {scheme:<30} {w['full window']:>25.2e} {w['partial window']:>17.2e} {final[scheme]:>11.4f} {gap:>25.2e}")
    print("Grad error: relative to the float64 full-batch gradient at the same parameters. Curve gap: mean |loss - full-batch")
    print("run's loss| per step (float32 training; rounding differences grow chaotically over long runs).")


def _curve_gap(curve: Sequence[float], reference: Sequence[float], steps: int) -> float:
    n = min(steps, len(curve), len(reference))
    return sum(abs(a - b) for a, b in zip(curve[:n], reference[:n])) / max(n, 1)


# ------------------------------------------------------------------ plots
def _plot(out: Path, sweep, curves) -> List[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(plots skipped: matplotlib is not installed; pip install 'gradguard[plot]')")
        return []
    paths = []
    fig, (ax, gap_ax) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    reference = curves[SCHEMES[0]]
    for scheme, curve in curves.items():
        steps = range(1, len(curve) + 1)
        ax.plot(steps, _smooth(curve), label=scheme, lw=1.4)
        if scheme != SCHEMES[0]:
            # The curves overlap at this scale; their distance from the full-batch run does not.
            gap = [max(abs(a - b), 1e-9) for a, b in zip(curve, reference)]
            gap_ax.plot(steps, _smooth(gap), label=scheme, lw=1.2, color=ax.lines[-1].get_color())
    ax.set_ylabel("window loss (token-mean CE, smoothed)")
    ax.set_title("Tiny causal LM: training with each accumulation scheme")
    ax.legend()
    ax.grid(alpha=0.3)
    gap_ax.set_yscale("log")
    gap_ax.set_xlabel("optimizer step")
    gap_ax.set_ylabel("|loss - full-batch run's loss|")
    gap_ax.set_title("Distance from the full-batch run (float32; rounding grows chaotically)")
    gap_ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    paths.append(out / "loss_curves.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for scheme, errs in sweep.items():
        ns = sorted(errs)
        ax.plot(ns, [max(errs[n], 1e-17) for n in ns], marker="o", label=scheme)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("micro-batches per step (N)")
    ax.set_ylabel("relative gradient error vs full batch")
    ax.set_title("Accumulated gradient vs full batch (float64, 32 sequences)")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    paths.append(out / "gradient_error.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def _smooth(values: Sequence[float], k: int = 9) -> List[float]:
    out = []
    for i in range(len(values)):
        window = values[max(0, i - k + 1) : i + 1]
        out.append(sum(window) / len(window))
    return out


def _run_part(name: str, out: Path):
    from importlib import import_module

    module = import_module(f".{name}", __name__)
    runner = getattr(module, f"run_{name}")
    return runner(out)
