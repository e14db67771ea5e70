"""Lint time of two checkouts against ``ast.parse``, side by side in one process, on given files.

Loads ``gradguard.lint`` from this checkout's ``src`` (or ``--src``) and from another checkout's
``src`` (``--before``, for instance ``git archive main src | tar -x -C /tmp/before``), then runs
``ast.parse`` of the files, and each version's lint of the files together (as ``gradguard lint DIR``
does), in rounds whose order turns by one place; prints the best CPU seconds of each and the ratios::

    OMP_NUM_THREADS=1 python benchmarks/bench_lint_versions.py --before /tmp/before/src FILE_OR_DIR ...
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(src: Path):
    for name in [k for k in sys.modules if k == "gradguard" or k.startswith("gradguard.")]:
        del sys.modules[name]
    sys.path.insert(0, str(src))
    try:
        import gradguard.lint as lint
    finally:
        sys.path.remove(str(src))
    return lint


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="Python files or folders holding them")
    parser.add_argument("--before", type=Path, required=True, help="the other checkout's src folder")
    parser.add_argument("--src", type=Path, default=HERE.parent / "src", help="this checkout's src folder")
    parser.add_argument("--repeat", type=int, default=2, help="rounds (the best is kept)")
    args = parser.parse_args(argv)
    files = []
    for given in map(Path, args.paths):
        if not given.exists():
            print(f"bench_lint_versions: {given} does not exist; give Python files or folders", file=sys.stderr)
            return 2
        files += sorted(given.rglob("*.py")) if given.is_dir() else [given]
    sys.path.insert(0, str(HERE))
    import bench_lint

    now, before = _load(args.src), _load(args.before)
    sources = [(str(p), p.read_text(errors="replace")) for p in files]

    def parse():
        for path, src in sources:
            try:
                ast.parse(src, filename=path)
            except SyntaxError:
                pass

    conditions = {"parse": parse, "before": lambda: bench_lint.lint_tree(before, sources),
                  "now": lambda: bench_lint.lint_tree(now, sources)}
    names, best = list(conditions), {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in range(args.repeat):
            for name in names[r % 3:] + names[:r % 3]:
                t = time.process_time()
                conditions[name]()
                best[name] = min(best.get(name, float("inf")), time.process_time() - t)
    print(f"{len(files)} files; CPU s: ast.parse {best['parse']:.3f}, before {best['before']:.3f} "
          f"({best['before'] / best['parse']:.1f}x parse), now {best['now']:.3f} ({best['now'] / best['parse']:.1f}x parse)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
