"""The flow's merge of paths against its plain definition, on the merges a real lint makes.

Lints each Python file given (or found under a folder given) with ``check_source``, records the
argument of every ``_flow.merge_paths`` call, then runs ``merge_paths`` and the plain definition
(``_flow._merge_paths_slow``) on each in the same process, checks they return the same list, and
prints the CPU seconds of each, summed over the merges::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_merge.py DIR_OR_FILE ...
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="Python files or folders holding them")
    args = parser.parse_args(argv)
    files = []
    for given in map(Path, args.paths):
        if not given.exists():
            print(f"bench_merge: {given} does not exist; give Python files or folders", file=sys.stderr)
            return 2
        files += sorted(given.rglob("*.py")) if given.is_dir() else [given]

    from gradguard.lint import _flow, check_source

    fast, slow = _flow.merge_paths, _flow._merge_paths_slow
    recorded = []

    def recording(states):
        recorded.append(list(states))
        return fast(states)

    _flow.merge_paths = recording
    try:
        for path in files:
            check_source(path.read_text(errors="replace"), str(path))
    finally:
        _flow.merge_paths = fast
    seconds = {"now": 0.0, "definition": 0.0}
    for states in recorded:
        t = time.process_time()
        a = fast(list(states))
        seconds["now"] += time.process_time() - t
        t = time.process_time()
        b = slow(list(states))
        seconds["definition"] += time.process_time() - t
        if a != b or any(p[2] is not q[2] for x, y in zip(a, b) for p, q in zip(x.decisions, y.decisions)):
            print("bench_merge: a merge differs from the definition", file=sys.stderr)
            return 1
    ratio = seconds["definition"] / seconds["now"] if seconds["now"] else float("nan")
    print(f"{len(files)} files, {len(recorded)} merges, all identical; CPU s: definition {seconds['definition']:.2f}, "
          f"now {seconds['now']:.2f} ({ratio:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
