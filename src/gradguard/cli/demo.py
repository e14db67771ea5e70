"""``gradguard demo``: the main job on an embedded default."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="show the seed semantics, exact accumulation against the full batch, the watch and the linter",
        description=(
            "Trains a small causal LM on variable-length sequences four ways (full batch, divide-by-N, "
            "divide-by-N with an under-scaled final window, gradguard), prints each one's gradient error "
            "against the full batch, then runs the watch and the linter on a bundled buggy loop.\n\n"
            "example: gradguard demo --out ./gradguard-demo"
        ),
    )
    p.add_argument("--out", default="gradguard-demo", help="folder for the PNG plots (default: ./gradguard-demo)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per training run (default: the demo's own)")
    p.set_defaults(handler=_handle)


def _handle(args) -> int:
    from ..demo import run_demo

    return run_demo(out_dir=args.out, steps=args.steps)
