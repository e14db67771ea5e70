"""Fix safety by execution: ``gradguard lint --fix`` on every generated program, judged by running it.

Every program of the execution oracle (``benchmarks/oracle/``: training loops whose clearing,
step condition, scaling, remainder handling, logging and micro-batch sizes are drawn
independently, each in five forms) is fixed with the linter's safe fixes, and separately with
the unsafe ones too (``fix_source(..., unsafe=True)``, what ``--fix --unsafe-fixes`` applies).
Both the original and the fixed program run in float64 under the oracle's truth:

* on a **correct** program (the truth finds no defect) a fix must change nothing: counted are
  the programs whose text a fix changed, and those whose trained parameters differ from the
  original's (max abs difference above 1e-9) -- the goal of both is 0;
* on a **buggy** program the fixed one must train to the float64 reference: every step applies
  the mean gradient of its own window's items and no logged total keeps a graph (the truth
  requires nothing of it). A fix that leaves it wrong, makes it crash or adds a defect is
  counted as *wrong*; a program the linter offers no fix for is *not offered* (a fix the model
  cannot prove is not offered: that is allowed, only recorded).

Usage (from the repository root)::

    python benchmarks/oracle_fix_bench.py                      # 1,200 specs x 5 forms = 6,000 programs
    python benchmarks/oracle_fix_bench.py --specs 200 --jobs 2 --out fix.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from oracle import generate, truth  # noqa: E402

MODES = ("safe", "unsafe")
_DIR: Optional[str] = None
_TOL = 1e-9


def _fix(source: str, path: str, unsafe: bool):
    from gradguard.lint.autofix import fix_source

    r = fix_source(source, path, unsafe=unsafe)
    return r.text, sorted({f.code for f in r.fixed}), r.error


def _differs(a, b) -> bool:
    if a is None or b is None:
        return a is not b
    return a.shape != b.shape or bool((a - b).abs().max() > _TOL)


def evaluate_spec(args) -> dict:
    """Every form of one spec, fixed in each mode: what changed and what the fixed program trains to."""
    index, spec, forms, modes = args
    global _DIR
    if _DIR is None:
        _DIR = tempfile.mkdtemp(prefix="gg_oracle_fix_")
    x, y = generate.data_tensors(spec)
    rows = []
    for form in forms:
        source = generate.render(spec, form)
        path = os.path.join(_DIR, f"p{index}_{form}.py")
        before = truth.run(source, x, y, path)
        row = {"form": form, "required": sorted(before.required), "error": before.error}
        for mode in modes:
            text, codes, error = _fix(source, path, mode == "unsafe")
            entry = {"changed": text != source, "fixed_codes": codes, "fix_error": error}
            if text != source:
                after = truth.run(text, x, y, path)
                entry.update(after_required=sorted(after.required), after_error=after.error,
                             trains_differently=_differs(before.final, after.final))
                new = after.required - before.required
                if new and not after.error:
                    entry["own"] = sorted(new & _with_clearing_right(spec, form, path, x, y))
            row[mode] = entry
        rows.append(row)
    return {"index": index, "spec": spec.to_dict(), "rows": rows}


def _with_clearing_right(spec, form: str, path: str, x, y) -> set:
    """The defects of the same program with its clearing where it belongs (right after the step):
    those of its other choices (scaling, remainder, sizes). A window whose passes were wiped shows
    them only once its passes count, so a clearing fix may uncover them without making them."""
    import dataclasses

    ref = dataclasses.replace(spec, clear_place="after_step")
    t = truth.run(generate.render(ref, form), x, y, path)
    return set() if t.error else set(t.required)


def verdict(row: dict, mode: str) -> str:
    """One program in one mode. A correct program: ``unchanged``, ``changed-text`` (numbers the
    same), ``changed-training``. A buggy one: ``not-offered``; ``repaired`` (no defect left: every
    step applies its window's float64 mean); ``partial`` (what the applied fixes address is gone,
    defects of other choices are left, some of them hidden before by the repaired one: a window
    whose passes were all wiped shows its scaling only once they count, checked on the same
    program with its clearing right); ``wrong`` (the fixed program crashes, still has a defect a
    fix it got was for, or has a defect neither it nor its clearing-right twin had)."""
    e = row[mode]
    correct = not row["required"]
    if not e["changed"]:
        return "unchanged" if correct else "not-offered"
    if correct:
        return "changed-training" if e.get("after_error") or e.get("trains_differently") or e.get("after_required") else "changed-text"
    if e.get("after_error"):
        return "wrong"
    after = set(e.get("after_required") or ())
    if not after:
        return "repaired"
    new = after - set(row["required"]) - set(e.get("own") or ())
    return "wrong" if after & set(e["fixed_codes"]) or new else "partial"


def summarise(results, modes: Sequence[str]) -> dict:
    out = {"specs": len(results), "programs": 0, "harness_errors": 0, "modes": {}}
    counts = {m: Counter() for m in modes}
    by_code = {m: Counter() for m in modes}
    examples = {m: [] for m in modes}
    for r in results:
        for row in r["rows"]:
            if row["error"]:
                out["harness_errors"] += 1
                continue
            out["programs"] += 1
            for m in modes:
                v = verdict(row, m)
                counts[m][v] += 1
                if v in ("changed-training", "changed-text", "wrong", "partial"):
                    by_code[m][f"{v}:{'+'.join(row[m]['fixed_codes']) or '-'}"] += 1
                    if v != "partial" and len(examples[m]) < 40:
                        examples[m].append({"index": r["index"], "form": row["form"], "verdict": v, "required": row["required"],
                                            "fixed": row[m]["fixed_codes"], "after": row[m].get("after_required")})
    for m in modes:
        c = counts[m]
        correct = c["unchanged"] + c["changed-text"] + c["changed-training"]
        buggy = c["not-offered"] + c["repaired"] + c["partial"] + c["wrong"]
        out["modes"][m] = {"correct": correct, "buggy": buggy, **dict(c), "by_fix": dict(by_code[m]), "examples": examples[m]}
    return out


def table(s: dict) -> str:
    lines = [f"{s['programs']} programs ({s['specs']} specs), harness errors {s['harness_errors']}"]
    for m, c in s["modes"].items():
        lines += [
            "",
            f"{m} fixes: correct programs {c['correct']}: text changed {c.get('changed-text', 0)}, "
            f"training changed {c.get('changed-training', 0)}",
            f"  buggy programs {c['buggy']}: repaired (train to the float64 reference) {c.get('repaired', 0)}, "
            f"partly (other defects left) {c.get('partial', 0)}, wrong after the fix {c.get('wrong', 0)}, "
            f"no fix offered {c.get('not-offered', 0)}",
        ]
        for key, n in sorted(c["by_fix"].items(), key=lambda kv: -kv[1]):
            lines.append(f"    {key}: {n}")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--specs", type=int, default=1200, help="number of generated specs (each in every form)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--forms", default=",".join(generate.FORMS))
    p.add_argument("--modes", default=",".join(MODES), help="safe, unsafe (safe and unsafe fixes) or both")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--src", default=str(ROOT / "src"), help="the gradguard source tree to measure")
    p.add_argument("--out", help="write the JSON summary here")
    args = p.parse_args(argv)
    forms = tuple(f for f in args.forms.split(",") if f)
    modes = tuple(m for m in args.modes.split(",") if m)
    bad = [f for f in forms if f not in generate.FORMS] + [m for m in modes if m not in MODES]
    if bad:
        print(f"unknown form or mode {bad[0]!r}; forms: {', '.join(generate.FORMS)}; modes: {', '.join(MODES)}", file=sys.stderr)
        return 2
    sys.path.insert(0, args.src)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    import gradguard
    from gradguard._progress import progress

    work = [(i, s, forms, modes) for i, s in enumerate(generate.specs(args.specs, args.seed))]
    start = time.perf_counter()
    bar = dict(desc="oracle fix", total=len(work), disable=not sys.stderr.isatty())
    if args.jobs > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(args.jobs) as pool:
            results = list(progress(pool.imap(evaluate_spec, work, chunksize=8), **bar))
    else:
        results = [evaluate_spec(w) for w in progress(work, **bar)]
    elapsed = time.perf_counter() - start
    s = summarise(results, modes)
    s.update(seconds=round(elapsed, 1), seed=args.seed, forms=list(forms), gradguard=str(Path(gradguard.__file__).parent))
    print(table(s))
    print(f"\n{elapsed:.0f} s, gradguard from {Path(gradguard.__file__).parent}")
    if args.out:
        Path(args.out).write_text(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
