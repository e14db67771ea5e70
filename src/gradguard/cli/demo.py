"""``gradguard demo``: the main job on an embedded default."""

from __future__ import annotations

import argparse

from .._errors import GradguardError


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="show the seed semantics, exact accumulation on real text against the full batch, the watch and the linter",
        description=(
            "Trains a small byte-level transformer on the paragraphs of Python's own documentation\n"
            "(no download) three ways: one full batch per step; K micro-batches, each micro-batch's\n"
            "loss divided by K (what HF Accelerate, PyTorch Lightning and DeepSpeed do); and\n"
            "gradguard's Accumulator. Prints and plots each one's gradient error, held-out loss and\n"
            "weight distance against the full batch (float64), then runs the watch and the linter\n"
            "on a bundled buggy loop. Writes loss_curves.png, weight_distance.png,\n"
            "gradient_error.png and results.json into DIR."
        ),
        epilog="example:\n  gradguard demo --out ./gradguard-demo\n  gradguard demo --steps 10 --no-progress   # a shorter run, no bars",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", default="gradguard-demo", metavar="DIR",
                   help="folder for the plots and results.json, created if missing (default: ./gradguard-demo)")
    p.add_argument("--steps", default=None, metavar="N",
                   help="optimizer steps of each training run, a positive integer, run exactly (default: 30)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (they appear only on a terminal anyway)")
    return p


def handle(args) -> int:
    from ..demo import run_demo

    steps = None
    if args.steps is not None:
        try:
            steps = int(args.steps, 10)
        except ValueError:
            steps = None
        if steps is None or steps < 1:
            raise GradguardError(f"--steps must be a positive integer (optimizer steps per training run), got {args.steps!r}")
    return run_demo(out_dir=args.out, steps=steps, show_progress=not args.no_progress)
