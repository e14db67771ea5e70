"""The linter's output, this checkout's against another's, on every file it is measured on.

A speed change must not change a finding. This script lints the same files with two versions of
``gradguard.lint`` in one process (the other one from ``--before``, a checkout's ``src`` folder,
for instance ``git archive main src | tar -x -C /tmp/before``) and compares everything they return:
each finding whole (code, message, place, end, fix) and each skipped loop, with each file linted
alone (``check_source``, as the editor server does) and the files of one repository linted together
(``check_paths``, as ``gradguard lint DIR`` does). Groups:

* ``fixtures``: ``tests/lint_fixtures`` and ``tests/lint_corpus``;
* ``gradbench``: ``benchmarks/gradbench``;
* ``generated``: the execution oracle's programs (``--specs`` specs, every form);
* every repository set of ``lint_precision.py`` whose folder is extracted (``--sets``), one
  repository at a time.

Only counts and the names of differing files are printed for a held-out set (its findings are not
shown, so that running the check reads nothing of it); ``-v`` shows the first differing finding of
the other groups. Exit status 1 when anything differs.

Usage (from the repository root)::

    git archive main src | tar -x -C /tmp/before
    python benchmarks/lint_identical.py --before /tmp/before/src
    python benchmarks/lint_identical.py --before /tmp/before/src --sets wide-tune --specs 0 -v
    python benchmarks/lint_identical.py --before /tmp/before/src --sets --folders /work/realrepos_speed
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))


def _record(result) -> List[str]:
    """Every field of every finding and skipped record, as text (the two versions' classes differ)."""
    return [repr(tuple(f)) for f in result.findings] + ["skipped " + repr(tuple(s)) for s in result.skipped]


def lint_group(lint, files: Sequence[Tuple[str, str]]) -> Dict[str, List[str]]:
    """``{"each:" + path | "tree": records}`` for files given as ``(path, source)``."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path, src in files:
            out["each:" + path] = _record(lint.check_source(src, path))
        on_disk = [path for path, _ in files if Path(path).is_file()]
        if on_disk:
            tree = lint.check_paths(on_disk, exclude=[])
            by_path: Dict[str, List[str]] = {p: [] for p in on_disk}
            for f in tree.findings:
                by_path.setdefault(f.path, []).append(repr(tuple(f)))
            for s in tree.skipped:
                by_path.setdefault(s[0], []).append("skipped " + repr(tuple(s)))
            for p, records in by_path.items():
                out["tree:" + p] = records
    return out


def _read(paths: Sequence[Path]) -> List[Tuple[str, str]]:
    return [(str(p), p.read_text(errors="replace")) for p in paths]


def groups(sets: Sequence[str], specs: int, folders: Sequence[Path] = ()):
    """``(name, held_out, [(path, source)])`` for every group to compare."""
    import lint_precision as lp

    fixtures = sorted((ROOT / "tests" / "lint_fixtures").rglob("*.py")) + sorted((ROOT / "tests" / "lint_corpus").rglob("*.py"))
    yield "fixtures", False, _read(fixtures)
    yield "gradbench", False, _read(sorted((HERE / "gradbench").rglob("*.py")))
    if specs:
        from oracle import generate

        programs = []
        for n, spec in enumerate(generate.specs(specs, 0)):
            for form in generate.FORMS:
                programs.append((f"<generated {n} {form}>", generate.render(spec, form)))
        yield "generated", False, programs
    for name in sets:
        chosen = lp.SETS[name]
        for repo in chosen.repos:
            base = chosen.root / lp.folder(repo)
            if not base.is_dir():
                continue
            rel = lp._py_files(base, repo.paths)
            yield f"{name} {repo.name}", "heldout" in name, _read([base / r for r in rel])
    for top in folders:
        # every folder under ``top`` one repository (its .py files, linted alone and together); its
        # findings are not printed, as for a held-out set
        for base in sorted(p for p in top.iterdir() if p.is_dir()):
            yield f"{top.name} {base.name}", True, _read(sorted(base.rglob("*.py")))


def main(argv=None) -> int:
    import lint_precision as lp

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout's src folder")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="this checkout's src folder")
    parser.add_argument("--sets", nargs="*", default=sorted(lp.SETS), help="repository sets (default: every extracted one)")
    parser.add_argument("--folders", nargs="*", type=Path, default=[], metavar="DIR",
                        help="more repositories: every folder under each DIR is one (extracted by hand)")
    parser.add_argument("--specs", type=int, default=400, help="generated specs (x every form); 0: none")
    parser.add_argument("--before-cache", type=Path, default=None, metavar="JSON",
                        help="keep the other version's output in this file (read it when it exists: the other "
                             "version is not run again; delete it when the files or that version change)")
    parser.add_argument("-v", "--verbose", action="store_true", help="the first differing record of each group")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.src.resolve()))
    from _compare import load_copy

    new = importlib.import_module("gradguard.lint")
    old = importlib.import_module(load_copy(args.before, "gradguard_identical_before").__name__ + ".lint")
    totals = {"groups": 0, "files": 0, "records": 0, "differ": 0}
    seconds = {"before": 0.0, "after": 0.0}
    cache = json.loads(args.before_cache.read_text()) if args.before_cache and args.before_cache.exists() else None
    saved = {}
    for name, held_out, files in groups(args.sets, args.specs, args.folders):
        t = time.process_time()
        a = cache[name] if cache is not None and name in cache else lint_group(old, files)
        saved[name] = a
        seconds["before"] += time.process_time() - t
        t = time.process_time()
        b = lint_group(new, files)
        seconds["after"] += time.process_time() - t
        differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        totals["groups"] += 1
        totals["files"] += len(files)
        totals["records"] += sum(len(v) for v in b.values())
        totals["differ"] += len(differ)
        if differ or args.verbose:
            print(f"{name}: {len(files)} files, {sum(len(v) for v in b.values())} records, {len(differ)} differ", flush=True)
        for key in differ[:20]:
            print(f"  differs: {key}", flush=True)
            if args.verbose and not held_out:
                before, after = a.get(key, []), b.get(key, [])
                print("    before:", [r for r in before if r not in after][:2])
                print("    after: ", [r for r in after if r not in before][:2])
    if args.before_cache and cache is None:
        args.before_cache.write_text(json.dumps(saved))
    print(f"{totals['groups']} groups, {totals['files']} files, {totals['records']} records (each file alone and "
          f"linted together): {totals['differ']} differ; lint CPU s before {seconds['before']:.1f}, "
          f"after {seconds['after']:.1f}")
    return 1 if totals["differ"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
