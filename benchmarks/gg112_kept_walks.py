"""GG112 with its kept helper walks against the same rule walking every call, on real files.

Lints (GG112 alone) every Python file under the folders given that holds both a ``.scale(`` and a
clip or norm word (the files where GG112 runs at all), once as the rule stands and once with the
kept walks turned off, in the same process, and compares every field of every finding::

    OMP_NUM_THREADS=1 python benchmarks/gg112_kept_walks.py DIR ...
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="folders holding Python files")
    args = parser.parse_args(argv)
    import gradguard as gg
    from gradguard.lint.rules import gg112_clip_before_unscale as gg112

    kept_follow = gg112.Flow._follow
    files = []
    for folder in map(Path, args.folders):
        if not folder.is_dir():
            print(f"gg112_kept_walks: {folder} is not a folder", file=sys.stderr)
            return 2
        for path in sorted(folder.rglob("*.py")):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if ".scale(" in text and ("clip_grad" in text or "norm" in text):
                files.append((path, text))
    seconds = {"kept": 0.0, "every": 0.0}
    differ = found = 0
    for path, text in files:
        out = {}
        for mode in ("kept", "every"):
            gg112.Flow._follow = kept_follow if mode == "kept" else gg112.Flow._follow_walk
            t = time.process_time()
            try:
                out[mode] = [f.to_dict() for f in gg.lint_source(text, str(path), select=["GG112"])]
            except SyntaxError:
                out[mode] = "syntax"
            seconds[mode] += time.process_time() - t
        gg112.Flow._follow = kept_follow
        found += len(out["kept"]) if isinstance(out["kept"], list) else 0
        if out["kept"] != out["every"]:
            differ += 1
            print(f"differs: {path}", file=sys.stderr)
    print(f"{len(files)} files, {found} GG112 findings, {differ} files differ; lint CPU s: kept {seconds['kept']:.1f}, "
          f"every call walked {seconds['every']:.1f}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
