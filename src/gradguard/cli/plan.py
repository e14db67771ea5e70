"""``gradguard plan``: the largest micro-batch that fits a memory budget, and the accumulation steps.

The factory contract (``module:function`` as for a console-script entry point, found in
the current folder too, as uvicorn and flask do; or ``path/to/file.py:function``):

* it is called with ``batch_size=B`` when it accepts that keyword (or ``**kwargs``),
  else with no argument;
* it returns ``(model, loss_fn, batch)``: ``loss_fn(model, micro_batch)`` returns the
  scalar loss, ``batch`` holds at least B items along its first dimension (a tensor,
  or a tuple/list/dict of tensors) -- the contract of ``gradguard.check_equivalence``;
* or it returns just a model: the batch is then random floats of shape
  ``(B, *--input-shape)``, or ``(B, *model.example_input_array.shape[1:])`` when the
  model has Lightning's ``example_input_array``, and the loss is the mean of its output.

The model is measured where the factory put it (move it to ``cuda`` there to get
the measured CUDA peak) and in the mode it is in.
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import sys
from importlib import import_module

from .._errors import GradguardError
from ._paths import check_output_path

EXAMPLE = "gradguard plan gradguard.demo.model:plan_factory --batch-size 32 --budget 64MiB --plot plan.png"


def register(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="largest micro-batch size that fits a memory budget, and the accumulation steps it implies",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Measures the memory each micro-batch size needs to train a model (activations saved\n"
            "for backward; on CUDA also the peak), adds the fixed part (parameters, gradients,\n"
            "optimizer state), prints a table, the largest micro-batch size within the budget and\n"
            "the accumulation steps it implies, and writes a plot. Exit code 0, 1 if nothing fits.\n\n"
            "FACTORY is module:function (a module in the current folder or on the import path)\n"
            "or path/to/file.py:function, returning (model, loss_fn, batch), loss_fn(model,\n"
            "micro_batch) -> loss, or just a model (then --input-shape, or the model's\n"
            "example_input_array). It is called with batch_size=B if it accepts that keyword.\n\n"
            f"example: {EXAMPLE}"
        ),
    )
    p.add_argument("factory", metavar="FACTORY", help="module:function or file.py:function building the model (see above)")
    p.add_argument("--batch-size", type=int, required=True, help="items per optimizer step (the full batch)")
    p.add_argument("--budget", required=True, help="memory budget per device, e.g. 2GiB, 512MiB, 1.5GB")
    p.add_argument("--sizes", default=None, help="comma-separated micro-batch sizes (default: powers of 2 up to the batch size)")
    p.add_argument("--optimizer-states", type=float, default=2.0,
                   help="optimizer state per gradient element: 2 Adam/AdamW (default), 1 SGD+momentum, 0 SGD")
    p.add_argument("--input-shape", default=None, help="per-item input shape when the factory returns a bare model, e.g. 3,32,32")
    p.add_argument("--plot", default="gradguard-plan.png", help="PNG to write (default: ./gradguard-plan.png); '' for none")
    p.add_argument("--no-progress", action="store_true", help="no progress display while measuring")
    return p


def handle(args) -> int:
    from .. import memory
    from .._progress import progress

    if args.batch_size < 1:
        raise GradguardError(f"--batch-size must be >= 1, got {args.batch_size}")
    budget = memory.parse_bytes(args.budget)
    sizes = _sizes(args.sizes, args.batch_size) if args.sizes else memory.default_sizes(args.batch_size)
    if args.plot:
        check_output_path(args.plot, "--plot")  # before measuring, not after
    model, loss_fn, batch = _build(args.factory, args.batch_size, args.input_shape)
    n = memory.batch_len(batch)
    if n < max(sizes):
        raise GradguardError(f"the factory's batch holds {n} items, fewer than the largest size measured ({max(sizes)}): "
                             "return a batch with at least --batch-size items")

    report = memory.measure_memory(
        model, loss_fn, batch, sizes, optimizer_states=args.optimizer_states,
        progress=lambda it: progress(it, desc="gradguard plan", total=len(sizes), disable=args.no_progress),
    )
    fmt = _formatter([report.required(r) for r in report.rows], budget)
    print(report.table(budget, fmt=fmt))
    best = report.largest_fitting(budget)
    print()
    if best is None:
        print(f"nothing fits {fmt(budget)}: even micro-batch size {report.rows[0].micro_batch_size} "
              f"needs {fmt(report.required(report.rows[0]))} (fixed part {fmt(report.fixed_bytes)})")
    else:
        steps = math.ceil(args.batch_size / best.micro_batch_size)
        print(f"largest micro-batch size within {fmt(budget)}: {best.micro_batch_size} "
              f"-> {steps} accumulation step{'s' if steps != 1 else ''} per batch of {args.batch_size} "
              f"(Accumulator(optimizer, steps={steps}))")
    if args.plot:
        try:
            print(f"plot: {_plot(report, budget, best, args.plot)}")
        except OSError as exc:  # checked before measuring, so only a late failure (a full disk) lands here
            print(f"gradguard plan: error: could not write the plot to {args.plot}: {exc.strerror or exc}",
                  file=sys.stderr)
    return 0 if best is not None else 1


def _fixed(n: float, digits: int) -> str:
    """Bytes in the unit :func:`gradguard.memory.format_bytes` would pick, with ``digits`` decimals."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.{digits}f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _formatter(values, budget: int):
    """A byte formatter with enough digits that no value reads the same as the budget unless it is equal
    (else "fits: no" beside "2.00 MiB" for a 2.00 MiB budget looks wrong).

    >>> f = _formatter([2 * 2**20 + 1], 2 * 2**20)
    >>> f(2 * 2**20 + 1), f(2 * 2**20)
    ('2.000001 MiB', '2.000000 MiB')
    >>> _formatter([2 * 2**20 + 900], 2 * 2**20)(2 * 2**20 + 900)
    '2.001 MiB'
    """
    from ..memory import format_bytes

    for f in [format_bytes] + [lambda n, d=d: _fixed(n, d) for d in range(3, 7)]:
        if all(v == budget or f(v) != f(budget) for v in values):
            return f
    return lambda n: f"{int(n)} B"


def _sizes(text: str, batch_size: int) -> list:
    try:
        sizes = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise GradguardError(f"--sizes must be comma-separated integers, got {text!r}") from None
    if not sizes or sizes[0] < 1 or sizes[-1] > batch_size:
        raise GradguardError(f"--sizes must lie between 1 and --batch-size {batch_size}, got {text!r}")
    return sizes


def _build(spec: str, batch_size: int, input_shape):
    """Import and call the factory; normalise what it returns to (model, loss_fn, batch)."""
    import torch

    factory = load_factory(spec)
    if not callable(factory):
        raise GradguardError(f"{spec} is a {type(factory).__name__}, not a function")
    try:
        params = inspect.signature(factory).parameters
        takes_size = "batch_size" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):  # builtins without a signature
        takes_size = False
    built = factory(batch_size=batch_size) if takes_size else factory()

    if isinstance(built, torch.nn.Module):
        model = built
        if input_shape:
            shape = tuple(int(s) for s in str(input_shape).split(",") if s.strip())
        elif getattr(model, "example_input_array", None) is not None:
            shape = tuple(model.example_input_array.shape[1:])
        else:
            raise GradguardError(f"{spec} returned a bare model: give --input-shape (per item, e.g. 3,32,32), "
                                 "or return (model, loss_fn, batch) from the factory")
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
        dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
        batch = torch.randn((batch_size, *shape), device=device, dtype=dtype)
        return model, _mean_output_loss, batch
    if isinstance(built, tuple) and len(built) == 3 and isinstance(built[0], torch.nn.Module) and callable(built[1]):
        return built
    raise GradguardError(f"{spec} must return a torch.nn.Module or (model, loss_fn, batch), got {type(built).__name__}")


def load_factory(spec: str):
    """``module:function`` (the current folder is searched first, as ``python -m`` does) or
    ``path/to/file.py:function`` (its folder is put on the import path for its own imports)."""
    import os

    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise GradguardError("FACTORY must be module:function or path/to/file.py:function "
                             f"(e.g. gradguard.demo.model:plan_factory), got {spec!r}")
    try:
        if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
            module = _import_file(module_name)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = import_module(module_name)
        factory = module
        for part in attr.split("."):
            factory = getattr(factory, part)
    except (ImportError, AttributeError, OSError) as exc:
        raise GradguardError(f"cannot load the factory {spec!r}: {exc}") from None
    return factory


def _import_file(path: str):
    import importlib.util
    import os

    if not os.path.isfile(path):
        raise ImportError(f"no such file: {path!r}")
    name = os.path.splitext(os.path.basename(path))[0]
    if name in sys.modules:  # never replace a module already imported under that name
        name = f"_gradguard_factory_{name}"
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: pickling and dataclasses look it up
    spec.loader.exec_module(module)
    return module


def _mean_output_loss(model, batch):
    out = model(batch)
    return out.float().mean()


def _plot(report, budget: int, best, path: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from .._extras import install_hint

        print(f"gradguard plan: matplotlib is not installed, no plot ({install_hint('plot')})", file=sys.stderr)
        return "(none)"
    mib = 2**20
    xs = [r.micro_batch_size for r in report.rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(xs, [report.required(r) / mib for r in report.rows], "o-", label="required (estimate)")
    ax.plot(xs, [r.activation_bytes / mib for r in report.rows], "s--", label="activations saved for backward")
    if any(r.peak_bytes is not None for r in report.rows):
        ax.plot(xs, [(r.peak_bytes or 0) / mib for r in report.rows], "^:", label="CUDA peak allocated")
    ax.axhline(report.fixed_bytes / mib, color="grey", lw=1, label="fixed: params + grads + optimizer")
    ax.axhline(budget / mib, color="red", lw=1.5, label=f"budget {budget / mib:.3g} MiB")
    if best is not None:
        ax.axvline(best.micro_batch_size, color="green", lw=1, ls="--", label=f"largest fitting: {best.micro_batch_size}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batch size")
    ax.set_ylabel("MiB")
    ax.set_title(f"memory by micro-batch size ({report.device})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    from .._files import replacing

    try:
        with replacing(path) as fh:  # a new file renamed over the path: nothing planted beside it is followed
            fig.savefig(fh, format=os.path.splitext(path)[1][1:].lower() or None, dpi=110)
    finally:
        plt.close(fig)
    return path
