"""``gradguard demo``: the main job, on real text, in well under a minute on a CPU.

1. The seed semantics: ``backward()`` adds into ``.grad``.
2. Accumulation on real text: a byte-level transformer trained on the paragraphs
   of Python's own documentation, with one big batch per step, with K
   micro-batches divided by K (what the frameworks do), and with gradguard's
   ``Accumulator``; gradient error, held-out loss and weight distance, float64.
3. The run-time watch on a bundled buggy loop.
4. The linter on the same loop's source.

Writes ``loss_curves.png``, ``weight_distance.png``, ``gradient_error.png`` and
``results.json`` into the output folder.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Optional, Union

from .._errors import GradguardError
from .._files import probe_folder, replace_file

PLOTS = ("loss_curves.png", "weight_distance.png", "gradient_error.png")


def run_demo(out_dir: Union[str, os.PathLike] = "gradguard-demo", steps: Optional[int] = None, *, show_progress: bool = True) -> int:
    """Run the whole demo, print its findings, write its plots and ``results.json`` into ``out_dir``.

    Args:
        out_dir: the output folder (created if missing).
        steps: optimizer steps of each training run (default 30); run exactly.
        show_progress: progress bars on stderr (only where stderr is a terminal).

    Returns:
        0.

    Raises:
        GradguardError: ``steps`` is not a positive integer, or ``out_dir`` cannot be written;
            both are checked before any work.
    """
    from .exactness import DEFAULT_STEPS

    steps = DEFAULT_STEPS if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise GradguardError(f"steps must be a positive integer (optimizer steps per training run), got {steps!r}")
    out = check_out_dir(out_dir)

    import torch

    start = time.perf_counter()
    threads = torch.get_num_threads()
    # One thread: a model this small gains nothing from a second one, and a thread pool
    # that must wait for a core another process keeps busy makes every step slower.
    torch.set_num_threads(1)
    try:
        results = _main(out, steps, show_progress)
    finally:
        torch.set_num_threads(threads)
    results["seconds"] = round(time.perf_counter() - start, 1)
    replace_file(out / "results.json", (json.dumps(results, indent=2) + "\n").encode(), follow_links=False)
    print(f"wrote {out / 'results.json'}")
    print(f"demo finished in {results['seconds']:.1f} s")
    return 0


def check_out_dir(out_dir: Union[str, os.PathLike]) -> Path:
    """Create ``out_dir`` if needed and prove it writable, or raise :class:`GradguardError`."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe_folder(out)  # a new file of an unpredictable name: a link planted in the folder is never followed
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise GradguardError(f"cannot write the demo's output folder {str(out)!r} ({reason}); pass a writable folder with --out DIR") from None
    return out


def _main(out: Path, steps: int, show_progress: bool) -> dict:
    from .._progress import progress
    from . import exactness as ex

    def bar(desc):
        return lambda iterable: progress(iterable, desc=desc, disable=not show_progress)

    _heading("1. backward() adds into .grad")
    _semantics()

    _heading("2. Gradient accumulation on real text, against the full batch")
    corpus = ex.Corpus()
    model = ex.new_model()
    lengths = [len(p) for p in corpus.train]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Data: {len(corpus.train):,} training and {ex.HELDOUT} held-out paragraphs of Python's own documentation")
    print(f"(pydoc_data.topics, Python {platform.python_version()}), as UTF-8 bytes, {min(lengths)} to {max(lengths)} bytes long")
    cut = sum(len(p) == ex.MAX_BYTES for p in corpus.train) / len(lengths)
    print(f"(cut at {ex.MAX_BYTES}, which {cut:.0%} of them reach; mean {sum(lengths) / len(lengths):.0f}), padding ignored in the loss;")
    print(f"{ex.WINDOW} paragraphs per optimizer step.")
    print(f"Model: a byte-level causal transformer ({ex.LAYERS} block, width {ex.DIM}, {n_params:,} parameters), AdamW lr {ex.LR:g}, float64.")
    print("Schemes, from one initialisation on one data order:")
    print("  full batch    K = 1: one backward pass over the step's 16 paragraphs")
    print("  divide-by-K   K micro-batches, each micro-batch's mean loss divided by K: what HF Accelerate,")
    print("                PyTorch Lightning and DeepSpeed do when they accumulate gradients")
    print("  gradguard     K micro-batches through gg.Accumulator(opt, steps=K), acc.backward(loss, count=n_tokens)")

    sweep = ex.gradient_error_sweep(corpus, progress=bar("gradient error"))
    print(f"\nGradient error ||g - g_full|| / ||g_full|| at the initial weights (mean over the first {ex.SWEEP_WINDOWS} steps' paragraphs):")
    print(f"  {'K':>3} {'divide-by-K':>12} {'gradguard':>10}")
    for k in ex.SWEEP_KS:
        print(f"  {k:>3} {sweep[ex.DIVIDE][k]:>12.1e} {sweep[ex.GRADGUARD][k]:>10.1e}")
    print(f"  (the full batch with its paragraphs reversed, rounding alone: {sweep[ex.REORDERED]:.1e})")

    print(f"\nTraining {steps} optimizer steps, six runs side by side (full batch, twice; both schemes at K = {', '.join(map(str, ex.KS))}) ...")
    curves = ex.train_side_by_side(corpus, steps, progress=bar("training"))
    results = _results(ex, corpus, steps, n_params, lengths, sweep, curves)
    _print_table(results)
    plots = _plot(out, results)

    # Parts 3 and 4 print their own headings.
    from .lint_part import run_lint_part
    from .watch_part import run_watch_part

    print()
    watch_summary = run_watch_part(out)
    print()
    lint_summary = run_lint_part(out)
    print(f"\nThe watch found {watch_summary['findings']} findings ({', '.join(watch_summary['codes'])}) at run time; "
          f"the linter found {lint_summary['findings']} ({', '.join(lint_summary['codes'])}) before anything ran.")
    results["watch"] = watch_summary
    results["lint"] = {key: value for key, value in lint_summary.items() if key != "path"}
    for path in plots:
        print(f"wrote {path}")
    return results


def _heading(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 70 - len(text)))


def _semantics() -> None:
    import torch

    import gradguard as gg

    x = torch.ones(3, requires_grad=True)
    print("x = torch.ones(3, requires_grad=True); (x * 2).sum().backward(), three times:")
    print(f"  not cleared:            {gg.grads_per_step(x, 3, clear=False)}")
    print(f"  x.grad = None each time: {gg.grads_per_step(x, 3, clear=True)}")
    print("Each backward adds its gradient to what .grad already holds; clearing is the loop's job.")


def _results(ex, corpus, steps, n_params, lengths, sweep, curves) -> dict:
    full_final = curves["heldout_loss"][ex.FULL][-1]
    schemes = (ex.DIVIDE, ex.GRADGUARD)
    table = []
    for k in ex.KS:
        table.append({
            "K": k,
            "paragraphs_per_micro_batch": ex.WINDOW // k,
            "gradient_error": {s: sweep[s][k] for s in schemes},
            "final_heldout_loss_minus_full_batch": {s: curves["heldout_loss"][ex.run_name(s, k)][-1] - full_final for s in schemes},
            "final_weight_distance": {s: curves["weight_distance"][ex.run_name(s, k)][-1] for s in schemes},
        })
    rounding = {
        "what": "the full batch with each step's paragraphs in reverse order: the same sums, rounded differently",
        "gradient_error": sweep[ex.REORDERED],
        "final_heldout_loss_minus_full_batch": curves["heldout_loss"][ex.REORDERED][-1] - full_final,
        "final_weight_distance": curves["weight_distance"][ex.REORDERED][-1],
    }
    return {
        "data": {
            "source": f"pydoc_data.topics of Python {platform.python_version()}",
            "train_paragraphs": len(corpus.train),
            "heldout_paragraphs": ex.HELDOUT,
            "max_bytes": ex.MAX_BYTES,
            "bytes_per_paragraph": {"min": min(lengths), "max": max(lengths), "mean": round(sum(lengths) / len(lengths), 1)},
            "paragraphs_per_step": ex.WINDOW,
        },
        "model": {"kind": "byte-level causal transformer", "blocks": ex.LAYERS, "width": ex.DIM, "parameters": n_params},
        "training": {"steps": steps, "optimizer": f"AdamW(lr={ex.LR:g})", "dtype": "float64"},
        "units": {
            "gradient_error": f"||g - g_full|| / ||g_full|| at the initial weights, mean over the first {ex.SWEEP_WINDOWS} steps' paragraphs",
            "heldout_loss": "token-mean cross-entropy over the held-out paragraphs, nats per byte",
            "weight_distance": "||w - w_full|| / ||w_full|| after the last step",
        },
        "full_batch_heldout_loss": {"initial": curves["heldout_loss"][ex.FULL][0], "final": full_final},
        "table": table,
        "rounding_reference": rounding,
        "gradient_error_sweep": {
            "K": list(ex.SWEEP_KS),
            "windows": ex.SWEEP_WINDOWS,
            **{s: [sweep[s][k] for k in ex.SWEEP_KS] for s in schemes},
            ex.REORDERED: sweep[ex.REORDERED],
        },
        "curves": curves,
        "platform": {"python": platform.python_version(), "torch": _torch_version(), "system": sys.platform},
    }


def _torch_version() -> str:
    import torch

    return torch.__version__


def _print_table(results: dict) -> None:
    steps = results["training"]["steps"]
    full = results["full_batch_heldout_loss"]
    print(f"\nFull batch (K = 1): held-out loss {full['initial']:.3f} -> {full['final']:.3f} nats per byte after {steps} steps.")
    print("Each scheme against the full batch (float64, so anything near 1e-16 to 1e-13 is rounding):")
    groups = ("gradient error", f"held-out loss - full, step {steps}", f"weight distance, step {steps}")
    rows = [("K (paragraphs each)", ["divide-by-K", "gradguard"] * 3)]
    for row in results["table"]:
        g, d, w = row["gradient_error"], row["final_heldout_loss_minus_full_batch"], row["final_weight_distance"]
        each = row["paragraphs_per_micro_batch"]
        rows.append((f"{row['K']:<3}({each} paragraph{'s' if each > 1 else ''})",
                     [f"{g['divide-by-K']:.1e}", f"{g['gradguard']:.1e}", f"{d['divide-by-K']:+.1e}",
                      f"{d['gradguard']:+.1e}", f"{w['divide-by-K']:.1e}", f"{w['gradguard']:.1e}"]))
    r = results["rounding_reference"]  # one figure per group, in its first column
    rows.append(("full batch, paragraphs reversed", [f"{r['gradient_error']:.1e}", "",
                                                      f"{r['final_heldout_loss_minus_full_batch']:+.1e}", "",
                                                      f"{r['final_weight_distance']:.1e}", ""]))
    # Widths from the contents (a group's title spans its two columns), so no title or figure runs
    # into the next one, whatever length --steps gives the titles.
    widths = [max(len(cells[i]) for _, cells in rows) for i in range(6)]
    for i, title in enumerate(groups):
        widths[2 * i + 1] = max(widths[2 * i + 1], len(title) - widths[2 * i] - 2)
    label = max(len(name) for name, _ in rows) + 2
    spans = [f"{t:<{widths[2 * i] + 2 + widths[2 * i + 1]}}" for i, t in enumerate(groups)]
    print(f"  {'':<{label}}{'   '.join(spans)}".rstrip())
    for name, cells in rows:
        pairs = (f"{cells[2 * i]:<{widths[2 * i]}}  {cells[2 * i + 1]:<{widths[2 * i + 1]}}" for i in range(3))
        print(f"  {name:<{label}}{'   '.join(pairs)}".rstrip())
    print("The last row is rounding alone: the full batch's own sums, added in another order.")
    print("gradient error: ||g - g_full|| / ||g_full|| at the initial weights; held-out loss in nats per byte;")
    print("weight distance: ||w - w_full|| / ||w_full||. Also in results.json.")


def _plot(out: Path, results: dict):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from .._extras import install_hint

        print(f"(plots skipped: matplotlib is not installed; {install_hint('demo')})")
        return []
    from .plots import write_plots

    return write_plots(out, results)
