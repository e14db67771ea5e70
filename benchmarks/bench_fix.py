"""Time of ``gradguard lint --fix`` against plain lint on torch/nn + torch/optim (copies in a temp folder).

Usage (from the repository root)::

    PYTHONPATH=src python benchmarks/bench_fix.py [--rounds 5]

The installed torch is never touched: its ``nn`` and ``optim`` folders are copied first and
``--fix`` runs on the copies (writing where a fix applies). Rounds alternate the two, best of
each is reported, and the ratio is the figure to read on a shared machine.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    import torch

    from gradguard.lint import iter_python_files, lint_paths
    from gradguard.lint.autofix import fix_file

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    src = Path(torch.__file__).parent
    with tempfile.TemporaryDirectory() as tmp:
        for part in ("nn", "optim"):
            shutil.copytree(src / part, Path(tmp) / part)
        files = list(iter_python_files([tmp]))
        lines = sum(len(Path(f).read_bytes().splitlines()) for f in files)
        best = {"lint": float("inf"), "fix": float("inf")}
        fixed = 0
        for r in range(args.rounds):
            order = ("lint", "fix") if r % 2 == 0 else ("fix", "lint")
            for what in order:
                t = time.perf_counter()
                if what == "lint":
                    lint_paths(files)
                else:
                    fixed = sum(len(fix_file(f).result.fixed) for f in files)
                best[what] = min(best[what], time.perf_counter() - t)
    print(f"torch {torch.__version__}: {len(files)} files, {lines} lines; best of {args.rounds} alternating rounds")
    print(f"lint:  {best['lint']:.3f} s")
    print(f"--fix: {best['fix']:.3f} s ({best['fix'] / best['lint']:.2f}x lint), {fixed} findings fixed in the last round")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
