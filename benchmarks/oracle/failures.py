"""Disagreement classes of an ``oracle_bench.py --out`` report: per (tool, rule, FP/FN), the
spec choices over-represented among the failures, and the smallest failing program.

    python benchmarks/oracle/failures.py oracle.json > failures.md
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
import dataclasses
from typing import Dict, Tuple
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oracle import generate  # noqa: E402

ATTRS = ("condition", "clear_form", "clear_place", "division", "remainder", "logging", "backward",
         "log_via", "clear_guard", "subclass", "run_length", "count", "masked", "step_helper")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(generate.Spec) if f.name in ATTRS}


def _key(spec: dict) -> dict:
    d = dict(spec)
    d["sizes"] = "equal" if len(set(spec["sizes"])) == 1 else "unequal"
    for a, v in _DEFAULTS.items():  # reports written before a choice existed
        d.setdefault(a, v)
    return d


def _rates(detail: dict, tool: str, code: str, kind: str) -> Dict[Tuple[str, str], Tuple[int, int]]:
    """Per (choice, value): (failures, programs where the rule is at stake).

    At stake: for a false negative, the truth requires the code; for a false positive, it
    does not allow it."""
    pop: Counter = Counter()
    fails: Counter = Counter()
    for d in detail.values():
        k = _key(d["spec"])
        for row in d["rows"]:
            if row.get(tool) is None:
                continue
            allowed = set(row["required"]) | set(row["accepted"])
            if (code in allowed) if kind == "FP" else (code not in row["required"]):
                continue
            failed = (code in row[tool]) if kind == "FP" else (code not in row[tool])
            for a in ATTRS + ("sizes", "form"):
                v = row["form"] if a == "form" else str(k[a])
                pop[(a, v)] += 1
                fails[(a, v)] += failed
    return {key: (fails[key], n) for key, n in pop.items()}


def classes(report: dict, limit: int = 40) -> str:
    detail = report["specs_detail"]
    groups = defaultdict(list)
    for f in report["failures"]:
        groups[(f["tool"], f["code"], f["kind"])].append(f)
    out = []
    for (tool, code, kind), fs in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:limit]:
        rates = _rates(detail, tool, code, kind)
        at_stake = sum(n for (a, _), (_, n) in rates.items() if a == "form")
        out.append(f"### {tool} {code} {'false positive' if kind == 'FP' else 'false negative'}: "
                   f"{len(fs)} of {at_stake} programs at stake")
        out.append("")
        for a in ATTRS + ("sizes", "form"):
            vals = sorted(((v, f, n) for (aa, v), (f, n) in rates.items() if aa == a and n), key=lambda t: -t[1] / t[2])
            out.append(f"- {a}: " + ", ".join(f"{v} {f}/{n}" for v, f, n in vals))
        # the example: the shortest failing program among those of the most failing choice
        (ta, tv), _ = max(((key, f / n) for key, (f, n) in rates.items() if n >= 10 and key[0] != "form"),
                          key=lambda kv: kv[1], default=((None, None), 0))
        pool = [f for f in fs if ta is None or str(_key(detail[str(f["index"])]["spec"])[ta]) == tv] or fs
        best = min(pool, key=lambda f: len(generate.render(generate.Spec(**_spec(detail[str(f["index"])]["spec"])), f["form"])))
        r = detail[str(best["index"])]
        row = next(x for x in r["rows"] if x["form"] == best["form"])
        spec = generate.Spec(**_spec(r["spec"]))
        out.append("")
        out.append(f"example (spec #{best['index']}, form {best['form']}): truth requires {row['required']}, accepts "
                   f"{row['accepted']}; lint {row['lint']}; watch {row['watch']}")
        out.append("")
        out.append("```python")
        out.append(generate.render(spec, best["form"]).rstrip())
        out.append("```")
        for name, text in generate.modules(spec, best["form"]).items():  # the other files of a multi-file form
            out += ["", f"`{name}`:", "", "```python", text.rstrip(), "```"]
        out.append("")
    return "\n".join(out)


def _spec(d: dict) -> dict:
    d = dict(d)
    d["sizes"] = tuple(d["sizes"])
    return d


if __name__ == "__main__":
    print(classes(json.loads(Path(sys.argv[1]).read_text())))
